# Dump CPython line tables and the lines CPython itself derives from them.
#
# Usage: python3 dump.py OUT.json
#
# Runs unchanged on CPython 3.8 through 3.15. It compiles a corpus of tricky
# source, walks every code object (recursively through co_consts) and writes,
# per code object, the raw line table exactly as the heaplens C library copies
# it (co_lnotab on 3.8/3.9, co_linetable on 3.10+) together with the line
# CPython reports for every position the C library could send:
#
#   3.8/3.9  position = byte offset;     expected from dis.findlinestarts
#   3.10     position = code unit index; expected from co_lines()
#   3.11+    position = code unit index; expected from co_positions()
#
# As independent cross-checks it also records PyCode_Addr2Line (the function
# behind frame.f_lineno) for every position, called through ctypes, and
# "live" samples: f_lasti/f_lineno of real frames captured while the corpus
# runs.  None/-1 ("no line") is written as null.

import ctypes
import dis
import json
import sys
import types

MINOR = sys.version_info[1]
FILENAME = "ñandú_文件_🐍.py"


def gap(n):
    # Blank lines and comments produce no code but move the line counter,
    # forcing the multi-pair / multi-byte encodings of large deltas.
    return "\n" * (n // 2) + "# gap\n" * (n - n // 2)


def build_corpus():
    src = []
    add = src.append
    add("import functools\n")
    add("G = 1\n")
    # A long function with forward jumps > 127 and > 255 lines and a loop
    # whose back edge jumps < -128 lines.
    add("def long_jumps(n):\n")
    add("    x = n\n")
    add(gap(130))
    add("    x += 1\n")
    add(gap(300))
    add("    y = x * 2\n")
    add("    for i in range(n):\n")
    add("        _probe()\n")
    add(gap(200))
    add("        y += i\n")
    add(gap(1000))
    add("        if y > 10:\n")
    add("            y -= 1\n")
    add("    return y\n")
    # Body far below its def: decorators, docstring, big gap.
    add("def deco(f):\n")
    add("    @functools.wraps(f)\n")
    add("    def wrapper(*a, **k):\n")
    add("        return f(*a, **k)\n")
    add("    return wrapper\n")
    add("@deco\n")
    add("@deco\n")
    add(gap(10))
    add("@deco\n")
    add("def far_body(a,\n")
    add("             b=2,\n")
    add("             *args,\n")
    add("             **kw):\n")
    add('    """Docstring\n')
    add(gap(20))
    add('    spanning lines."""\n')
    add(gap(400))
    add("    _probe()\n")
    add("    return a + b\n")
    # try/except/finally, with-blocks.
    add("class Ctx:\n")
    add("    def __enter__(self):\n")
    add("        _probe()\n")
    add("        return self\n")
    add("    def __exit__(self, *exc):\n")
    add("        _probe()\n")
    add("        return False\n")
    add("def tryfinally(v):\n")
    add("    try:\n")
    add("        with Ctx() as c, \\\n")
    add("                Ctx():\n")
    add("            if v:\n")
    add("                raise ValueError(v)\n")
    add("    except ValueError as e:\n")
    add(gap(150))
    add("        _probe()\n")
    add("        r = 1\n")
    add("    except (TypeError,\n")
    add("            KeyError):\n")
    add("        r = 2\n")
    add("    else:\n")
    add("        r = 3\n")
    add("    finally:\n")
    add(gap(140))
    add("        _probe()\n")
    add("    return r\n")
    # Comprehensions, lambdas, nested functions, closures.
    add("def comps(n):\n")
    add("    a = [i * 2\n")
    add("         for i in range(n)\n")
    add("         if i % 2\n")
    add("         if _probe() is None]\n")
    add("    b = {k: v for k, v in\n")
    add("         zip(a,\n")
    add("             a)}\n")
    add("    c = {x for x in a}\n")
    add("    d = sum(x for x in a)\n")
    add("    f = lambda q: (q +\n")
    add("                   1 + _probe_v())\n")
    add("    def inner(z):\n")
    add("        def innermost():\n")
    add("            return z + n + _probe_v()\n")
    add("        return innermost()\n")
    add("    return f(1) + inner(2) + len(b) + len(c) + d\n")
    # Generators and async.
    add("def gen(n):\n")
    add("    for i in range(n):\n")
    add(gap(135))
    add("        yield i + _probe_v()\n")
    add("    yield from (j for j in range(n))\n")
    add("class AIter:\n")
    add("    def __init__(self):\n")
    add("        self.i = 0\n")
    add("    def __aiter__(self):\n")
    add("        return self\n")
    add("    async def __anext__(self):\n")
    add("        self.i += 1\n")
    add("        if self.i > 2:\n")
    add("            raise StopAsyncIteration\n")
    add("        return self.i\n")
    add("class ACtx:\n")
    add("    async def __aenter__(self):\n")
    add("        return self\n")
    add("    async def __aexit__(self, *e):\n")
    add("        return False\n")
    add("async def coro(n):\n")
    add("    t = 0\n")
    add("    async with ACtx():\n")
    add(gap(260))
    add("        async for v in AIter():\n")
    add("            t += v + _probe_v()\n")
    add("    r = [x async for x in AIter()]\n")
    add("    return t + len(r)\n")
    # Multi-line expressions and calls: arguments on later lines, the call
    # attributed back to earlier lines.
    add("def multiline(a):\n")
    add("    return max(\n")
    add("        a,\n")
    add(gap(128))
    add("        _probe_v(),\n")
    add("        a *\n")
    add("        2,\n")
    add(gap(3))
    add("    ) + (a\n")
    add("         if a else\n")
    add("         -a)\n")
    # Non-ASCII identifiers: kind 1 (latin-1), kind 2 (BMP), kind 4 (astral).
    add("def fünf(x):\n")
    add("    return x + _probe_v()\n")
    add("def fünf_函数(x):\n")
    add("    def 内部(y):\n")
    add("        return y + _probe_v()\n")
    add("    return 内部(x)\n")
    add("class Ñ𠀋:\n")
    add("    def 𠀀方法(self):\n")
    add("        return _probe_v()\n")
    # Unreachable / artificial code and a while loop with break/continue.
    add("def loops(n):\n")
    add("    i = 0\n")
    add("    while True:\n")
    add("        i += 1\n")
    add("        if i < n:\n")
    add(gap(140))
    add("            continue\n")
    add("        break\n")
    add("    else:\n")
    add("        i = -1\n")
    add("    return i + _probe_v()\n")
    # One source line with far more than 255 bytes of bytecode, so address
    # increments need several pairs (3.8-3.10) or many entries (3.11+).
    add("def long_line(a):\n")
    add("    r = [" + ", ".join("a + %d" % i for i in range(200)) + "]\n")
    add("    return len(r) + _probe_v()\n")
    # A 500-line function, one statement per line.
    add("def five_hundred(v):\n")
    for i in range(500):
        add("    v = v + %d\n" % i)
    add("    return v + _probe_v()\n")
    # Drive everything so that live frames are sampled.
    add("def main():\n")
    add("    long_jumps(12)\n")
    add("    far_body(1)\n")
    add("    tryfinally(0)\n")
    add("    tryfinally(1)\n")
    add("    comps(5)\n")
    add("    list(gen(3))\n")
    add("    c = coro(2)\n")
    add("    try:\n")
    add("        c.send(None)\n")
    add("    except StopIteration:\n")
    add("        pass\n")
    add("    multiline(3)\n")
    add("    fünf(1)\n")
    add("    fünf_函数(2)\n")
    add("    Ñ𠀋().𠀀方法()\n")
    add("    loops(3)\n")
    add("    five_hundred(0)\n")
    add("    long_line(1)\n")
    add("main()\n")
    return "".join(src)


def all_codes(co, out):
    out.append(co)
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            all_codes(c, out)
    return out


def name_info(s):
    # The raw PEP-393 kind cannot be read from pure Python; the Go test
    # rebuilds it from the code points exactly as CPython chooses it.
    cps = [ord(ch) for ch in s]
    return {"s": s, "cps": cps, "max": max(cps) if cps else 0}


def expected_lines(co):
    n = len(co.co_code) // 2
    if MINOR <= 9:
        # Positions are byte offsets; the line is that of the last line
        # start at or before the offset.
        starts = list(dis.findlinestarts(co))
        out = []
        for b in range(0, 2 * n, 2):
            line = None
            for addr, ln in starts:
                if addr <= b:
                    line = ln
            out.append(line)
        return out, None
    by_unit = [None] * n
    for start, end, line in co.co_lines():
        for b in range(start, end):
            if b % 2 == 0 and b // 2 < n:
                by_unit[b // 2] = line
    if MINOR == 10:
        return by_unit, None
    pos = [None] * n
    for i, p in enumerate(co.co_positions()):
        if i < n:
            pos[i] = p[0]
    return pos, by_unit


_addr2line = ctypes.pythonapi.PyCode_Addr2Line
_addr2line.argtypes = [ctypes.py_object, ctypes.c_int]
_addr2line.restype = ctypes.c_int


def addr2line(co):
    # PyCode_Addr2Line takes a byte offset on every version.
    n = len(co.co_code) // 2
    out = []
    for i in range(n):
        b = 2 * i
        v = _addr2line(co, b)
        out.append(None if v < 0 else v)
    return out


def main():
    out_path = sys.argv[1]
    src = build_corpus()
    top = compile(src, FILENAME, "exec")
    codes = all_codes(top, [])
    index = {id(c): i for i, c in enumerate(codes)}
    live = []

    def probe():
        f = sys._getframe(1)
        while f is not None:
            i = index.get(id(f.f_code))
            if i is not None and f.f_code is codes[i]:
                live.append({"code": i, "lasti": f.f_lasti, "lineno": f.f_lineno})
            f = f.f_back
        return None

    def probe_v():
        probe()
        return 0

    ns = {"_probe": probe, "_probe_v": probe_v, "__name__": "corpus"}
    exec(top, ns)

    recs = []
    for co in codes:
        table = co.co_lnotab if MINOR <= 9 else co.co_linetable
        exp, lines_exp = expected_lines(co)
        rec = {
            "filename": name_info(co.co_filename),
            "name": name_info(co.co_name),
            "qualname": name_info(getattr(co, "co_qualname", co.co_name)),
            "firstlineno": co.co_firstlineno,
            "table": table.hex(),
            "ncodeunits": len(co.co_code) // 2,
            "expected": exp,
            "addr2line": addr2line(co),
        }
        if lines_exp is not None:
            rec["colines"] = lines_exp
        recs.append(rec)
    doc = {
        "minor": MINOR,
        "version": sys.version,
        "codes": recs,
        "live": live,
    }
    with open(out_path, "w") as f:
        json.dump(doc, f)


if __name__ == "__main__":
    main()
