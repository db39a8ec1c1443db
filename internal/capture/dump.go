package capture

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Dump writes the records of a capture stream in file order, one per line,
// for people: to debug a capture or to read a test fixture (as pprof's
// Profile.String or memray parse). It starts with the format version and
// ends with what the reader skipped; on damage it writes every record read
// before it, then returns the *CorruptError.
func Dump(w io.Writer, r io.Reader) error {
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	rd, err := NewReader(r)
	if err != nil {
		return err
	}
	fmt.Fprintf(bw, "heaplens capture, format version %d\n", rd.Version())
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Fprintf(bw, "# %v\n", err)
			return err
		}
		fmt.Fprintf(bw, "%-8s %s\n", rec.Type, dumpBody(rec))
	}
	fmt.Fprintf(bw, "# %d chunks, %d records of unknown types skipped, %d long names cut\n", rd.ChunksRead(), rd.Skipped(), rd.Shortened())
	return nil
}

func dumpBody(rec *Record) string {
	q := strconv.Quote
	list := func(ss []string) string {
		out := make([]string, len(ss))
		for i, s := range ss {
			out[i] = q(s)
		}
		return "[" + strings.Join(out, " ") + "]"
	}
	switch rec.Type {
	case RecMeta:
		m := rec.Meta
		return fmt.Sprintf("version=%d heaplens=%s rate=%d start_unix_ns=%d host=%s command=%s",
			m.FormatVersion, q(m.HeaplensVersion), m.Rate, m.StartUnixNano, q(m.Host), list(m.Command))
	case RecProcess:
		p := rec.Process
		return fmt.Sprintf("stream=%d pid=%d ppid=%d start_mono_ns=%d exe=%s python=%s note=%s allocator=%s cmdline=%s",
			p.Stream, p.PID, p.PPID, p.StartMonoNano, q(p.Exe), q(p.Python), q(p.PythonNote), q(p.Allocator), list(p.Cmdline))
	case RecMapping:
		m := rec.Mapping
		return fmt.Sprintf("id=%d stream=%d [%#x,%#x) offset=%#x bias=%#x build_id=%s file=%s",
			m.ID, m.Stream, m.Start, m.Limit, m.Offset, m.LoadBias, m.BuildID, q(m.File))
	case RecLocation:
		l := rec.Location
		lines := make([]string, len(l.Lines))
		for i, ln := range l.Lines {
			lines[i] = fmt.Sprintf("%s %s:%d", q(ln.Function), q(ln.File), ln.Line)
		}
		return fmt.Sprintf("id=%d kind=%s mapping=%d address=%#x lines=[%s]", l.ID, l.Kind, l.MappingID, l.Address, strings.Join(lines, "; "))
	case RecStack:
		ids := make([]string, len(rec.Stack.Locations))
		for i, id := range rec.Stack.Locations {
			ids[i] = strconv.FormatUint(id, 10)
		}
		return fmt.Sprintf("id=%d locations=[%s]", rec.Stack.ID, strings.Join(ids, " "))
	case RecAlloc:
		a := rec.Alloc
		s := fmt.Sprintf("stream=%d tid=%d t=%d addr=%#x size=%d stack=%d func=%s",
			a.Stream, a.TID, a.TimeNano, a.Addr, a.Size, a.StackID, funcName(a.Func))
		if a.Origin != 0 || a.Method != 0 {
			s += fmt.Sprintf(" origin=%#x method=%s", a.Origin, MethodNames[a.Method])
		}
		return s
	case RecFree:
		f := rec.Free
		return fmt.Sprintf("stream=%d tid=%d t=%d addr=%#x", f.Stream, f.TID, f.TimeNano, f.Addr)
	case RecEnd:
		e := rec.End
		return fmt.Sprintf("stream=%d t=%d known=%v exit=%d signaled=%v signal=%d exec=%v dropped_allocs=%d dropped_frees=%d lost_bytes=%d high_water=%d max_rss=%d finished=%d ring=%d",
			e.Stream, e.TimeNano, e.Known, e.ExitCode, e.Signaled, e.Signal, e.Exec, e.DroppedAllocs, e.DroppedFrees, e.LostBytes, e.HighWater, e.MaxRSS, e.Finished, e.Ring)
	case RecRSS:
		return fmt.Sprintf("stream=%d t=%d bytes=%d high_water=%d", rec.RSS.Stream, rec.RSS.TimeNano, rec.RSS.Bytes, rec.RSS.HighWater)
	case RecOrigin:
		o := rec.Origin
		return fmt.Sprintf("stream=%d token=%#x tid=%d t=%d stack=%d", o.Stream, o.Token, o.TID, o.TimeNano, o.StackID)
	case RecNote:
		return fmt.Sprintf("stream=%d %s", rec.Note.Stream, q(rec.Note.Text))
	case RecResident:
		r := rec.Resident
		return fmt.Sprintf("stream=%d t=%d addr=%#x size=%d resident=%d", r.Stream, r.TimeNano, r.Addr, r.Size, r.Resident)
	case RecMalloc:
		m := rec.Malloc
		return fmt.Sprintf("stream=%d t=%d arena=%d mmapped=%d in_use=%d free=%d keep=%d", m.Stream, m.TimeNano, m.Arena, m.Mmapped, m.InUse, m.Free, m.Keep)
	case RecMark:
		m := rec.Mark
		return fmt.Sprintf("stream=%d t=%d value=%d", m.Stream, m.TimeNano, m.Value)
	}
	return ""
}

// funcName names a hooked function, or its number when unknown.
func funcName(f uint8) string {
	if n, ok := FuncNames[f]; ok {
		return n
	}
	return strconv.Itoa(int(f))
}
