package chat

import "testing"

// namespaceCases cover namespace() objects and attribute assignment.
var namespaceCases = []renderCase{
	{name: "counter across iterations", src: "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}", want: "4"},
	{name: "several attributes", src: "{% set ns = namespace(a=1, b='x') %}{% set ns.c = [ns.a, ns.b] %}{{ ns.a }}{{ ns.b }}{{ ns.c }}", want: "1x[1, 'x']"},
	{name: "missing attribute is undefined", src: "{% set ns = namespace() %}{{ ns.missing is defined }}|{{ ns.missing }}|", want: "False||"},
	{name: "repr", src: "{% set ns = namespace(a=1) %}{% set ns.b = none %}{{ ns }}", want: "<Namespace {'a': 1, 'b': None}>"},
	{name: "from a dict", src: "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}", want: "12"},
	{name: "last user index", src: "{% set ns = namespace(last=-1) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.last = loop.index0 %}{% endif %}{% endfor %}{{ ns.last }}", want: "3"},
	{name: "flag set inside nested loop", src: "{% set ns = namespace(found=false) %}{% for i in [1, 2] %}{% for j in [3, 4] %}{% if i * j == 8 %}{% set ns.found = true %}{% endif %}{% endfor %}{% endfor %}{{ ns.found }}", want: "True"},
	{name: "item access", src: "{% set ns = namespace(a=1) %}{{ ns['a'] }}", want: "1"},
	{name: "attribute set on non-namespace", src: "{% set d = {} %}{% set d.x = 1 %}", wantErr: "TemplateRuntimeError: cannot assign attribute on non-namespace object"},
	{name: "namespace is truthy", src: "{% set ns = namespace() %}{{ 'yes' if ns else 'no' }}", want: "yes"},
	{name: "mistral style alternation check", src: "{% set ns = namespace(index=0) %}{% for m in messages[1:] %}{% if (m.role == 'user') != (ns.index % 2 == 0) %}{{ raise_exception('roles must alternate') }}{% endif %}{% set ns.index = ns.index + 1 %}{% endfor %}ok", want: "ok"},
}

func TestNamespace(t *testing.T) { runCases(t, namespaceCases) }
