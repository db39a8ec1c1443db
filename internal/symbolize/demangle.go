package symbolize

import (
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// demangleName turns a C++ (_Z…) or Rust (legacy _ZN…17h<hash>E, v0 _R…)
// mangled name into the form profiles show: qualified name with template
// arguments, without parameter lists or clone suffixes ("ns::Klass::method",
// "operator new", "mycrate::module::function"). Anything else, and anything
// the demangler rejects, is returned unchanged, except that glibc's internal
// "__GI_" alias prefix is dropped: gcc records the asm alias as the DWARF
// linkage name, and __GI___libc_malloc is just __libc_malloc.
func demangleName(name string) string {
	if strings.HasPrefix(name, "__GI_") && len(name) > len("__GI_") {
		return name[len("__GI_"):]
	}
	if !strings.HasPrefix(name, "_Z") && !strings.HasPrefix(name, "_R") {
		return name
	}
	s, err := demangleSafe(name)
	if err != nil || s == "" {
		return name
	}
	return stripRustHash(s)
}

// demangleSafe calls the demangler with a recover: it parses untrusted symbol
// names and a bug there must only cost us the pretty name.
func demangleSafe(name string) (s string, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = "", errPanic
		}
	}()
	return demangle.ToString(name, demangle.NoParams)
}

type panicError struct{}

func (panicError) Error() string { return "demangler panicked" }

var errPanic error = panicError{}

// stripRustHash removes the "::h0123456789abcdef" disambiguator that legacy
// Rust mangling appends. Current demangler versions already drop it; this
// keeps the output stable if one does not.
func stripRustHash(s string) string {
	i := strings.LastIndex(s, "::h")
	if i < 0 || len(s)-i != 3+16 {
		return s
	}
	for _, c := range s[i+3:] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return s
		}
	}
	return s[:i]
}
