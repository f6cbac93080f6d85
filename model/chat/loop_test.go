package chat

import "testing"

// loopCases cover for loops: loop variables, filters, else, break/continue, scoping.
var loopCases = []renderCase{
	{name: "index and index0", src: "{% for m in messages %}{{ loop.index }}{{ loop.index0 }} {% endfor %}", want: "10 21 32 43 "},
	{name: "first last length", src: "{% for m in messages %}{{ loop.first }}/{{ loop.last }}/{{ loop.length }} {% endfor %}", want: "True/False/4 False/False/4 False/False/4 False/True/4 "},
	{name: "revindex", src: "{% for m in messages %}{{ loop.revindex }}{{ loop.revindex0 }} {% endfor %}", want: "43 32 21 10 "},
	{name: "previtem and nextitem", src: "{% for x in [1, 2, 3] %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}|{% endfor %}", want: "<1>2|1<2>3|2<3>|"},
	{name: "previtem undefined on first", src: "{% for x in [1, 2] %}{{ loop.previtem is defined }}{% endfor %}", want: "FalseTrue"},
	{name: "cycle", src: "{% for x in range(5) %}{{ loop.cycle('a', 'b', 'c') }}{% endfor %}", want: "abcab"},
	{name: "changed", src: "{% for x in [1, 1, 2, 2, 1] %}{{ loop.changed(x) }} {% endfor %}", want: "True False True False True "},
	{name: "depth", src: "{% for x in [1] %}{{ loop.depth }}{{ loop.depth0 }}{% endfor %}", want: "10"},
	{name: "loop repr", src: "{% for x in [1, 2] %}{{ loop }}{% endfor %}", want: "<LoopContext 1/2><LoopContext 2/2>"},
	{name: "filter clause counts only kept items", src: "{% for m in messages if m.role == 'user' %}{{ loop.index }}/{{ loop.length }}:{{ m.content }} {% endfor %}", want: "1/2:Hi there 2/2:Bye "},
	{name: "else runs on empty", src: "{% for x in [] %}x{% else %}empty{% endfor %}", want: "empty"},
	{name: "else runs when filter keeps nothing", src: "{% for x in [1, 3] if x is even %}x{% else %}none even{% endfor %}", want: "none even"},
	{name: "else skipped when iterated", src: "{% for x in [1] %}x{% else %}empty{% endfor %}", want: "x"},
	{name: "break", src: "{% for x in range(10) %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}", want: "012"},
	{name: "continue", src: "{% for x in range(6) %}{% if x is odd %}{% continue %}{% endif %}{{ x }}{% endfor %}", want: "024"},
	{name: "break in nested loop leaves inner only", src: "{% for i in range(3) %}{% for j in range(3) %}{% if j == 1 %}{% break %}{% endif %}{{ i }}{{ j }} {% endfor %}{% endfor %}", want: "00 10 20 "},
	{name: "nested loops shadow loop", src: "{% for i in [1, 2] %}{% for j in [3] %}{{ loop.index }}{% endfor %}{{ loop.index }}{% endfor %}", want: "1112"},
	{name: "tuple unpacking", src: "{% for a, b in [(1, 2), [3, 4]] %}{{ a }}+{{ b }} {% endfor %}", want: "1+2 3+4 "},
	{name: "items unpacking", src: "{% for k, v in {'x': 1, 'y': [2]}.items() %}{{ k }}={{ v }};{% endfor %}", want: "x=1;y=[2];"},
	{name: "items filter", src: "{% for k, v in {'x': 1} | items %}{{ k }}{{ v }}{% endfor %}", want: "x1"},
	{name: "iterating a string", src: "{% for c in 'héllo' %}{{ c }}.{% endfor %}", want: "h.é.l.l.o."},
	{name: "iterating a dict gives keys", src: "{% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %}", want: "ba"},
	{name: "iterating undefined is empty", src: "{% for x in nothing %}x{% else %}none{% endfor %}", want: "none"},
	{name: "set in loop does not leak", src: "{% set x = 'outer' %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }} {% endfor %}{{ x }}", want: "outer1 outer2 outer"},
	{name: "set in if leaks", src: "{% if true %}{% set y = 'set' %}{% endif %}{{ y }}", want: "set"},
	{name: "loop variable not visible after loop", src: "{% for m in messages %}{% endfor %}{{ m is defined }}{{ loop is defined }}", want: "FalseFalse"},
	{name: "reverse slice", src: "{% for m in messages[::-1] %}{{ m.role[0] }}{% endfor %}", want: "uaus"},
	{name: "slice skip system", src: "{% for m in messages[1:] %}{{ m.role }} {% endfor %}", want: "user assistant user "},
	{name: "messages index with loop.index0", src: "{% for m in messages %}{% if not loop.last %}{{ messages[loop.index0 + 1].role }} {% endif %}{% endfor %}", want: "user assistant user "},
	{name: "loop over range", src: "{% for i in range(1, 10, 4) %}{{ i }}{% endfor %}", want: "159"},
	{name: "unpack error", src: "{% for a, b in [1] %}{% endfor %}", wantErr: "TypeError: cannot unpack non-iterable int object"},
	{name: "iterate none error", src: "{% for x in none %}{% endfor %}", wantErr: "TypeError: 'NoneType' object is not iterable"},
}

func TestLoop(t *testing.T) { runCases(t, loopCases) }
