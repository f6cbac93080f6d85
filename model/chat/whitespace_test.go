package chat

import "testing"

// whitespaceCases cover trim_blocks, lstrip_blocks, - and + on tags, comments, raw, newlines.
var whitespaceCases = []renderCase{
	{name: "trim_blocks removes one newline after a block tag", src: "{% if true %}\nA\n{% endif %}\nB", want: "A\nB"},
	{name: "trim_blocks removes only one newline", src: "{% if true %}\n\nA{% endif %}", want: "\nA"},
	{name: "no trim after a variable tag", src: "{{ 'x' }}\nA", want: "x\nA"},
	{name: "lstrip_blocks strips indentation before a block tag", src: "X\n    {% if true %}A{% endif %}", want: "X\nA"},
	{name: "lstrip_blocks at template start", src: "   {% if true %}A{% endif %}", want: "A"},
	{name: "lstrip_blocks needs only whitespace before the tag", src: "x  {% if true %}A{% endif %}", want: "x  A"},
	{name: "lstrip_blocks strips tabs", src: "\t\t{% if true %}\n\tA\n\t{% endif %}\nB", want: "\tA\nB"},
	{name: "no lstrip before a variable tag", src: "X\n  {{ 'A' }}", want: "X\n  A"},
	{name: "indented block after trimmed newline", src: "{% if true %}\n   {% if true %}A{% endif %}\n{% endif %}", want: "A"},
	{name: "plus disables lstrip", src: "X\n  {%+ if true %}A{% endif %}", want: "X\n  A"},
	{name: "plus disables trim", src: "{% if true +%}\nA{% endif %}", want: "\nA"},
	{name: "minus strips all whitespace before", src: "A \n\t {%- if true %}B{% endif %}", want: "AB"},
	{name: "minus strips all whitespace after", src: "{% if true -%} \n\n B{% endif %}", want: "B"},
	{name: "minus on a variable tag", src: "A \n {{- 'B' -}} \n C", want: "ABC"},
	{name: "minus strips unicode whitespace", src: "A\u00a0\u3000{{- 'B' }}", want: "AB"},
	{name: "comment removed with its newline", src: "A{# c #}\nB", want: "AB"},
	{name: "indented comment line vanishes", src: "A\n   {# c #}\nB", want: "A\nB"},
	{name: "comment with minus", src: "A  {#- c -#}  B", want: "AB"},
	{name: "multi-line comment", src: "A{# line1\nline2 #}B", want: "AB"},
	{name: "one trailing newline dropped", src: "A\n", want: "A"},
	{name: "only one trailing newline dropped", src: "A\n\n", want: "A\n"},
	{name: "CRLF and CR normalised", src: "A\r\nB\rC{% if true %}\r\nD{% endif %}", want: "A\nB\nCD"},
	{name: "raw block", src: "{% raw %}{{ x }} {% if %}{% endraw %}", want: "{{ x }} {% if %}"},
	{name: "raw keeps its inner newline", src: "{% raw %}\nA\n{% endraw %}\nB", want: "\nA\nB"},
	{name: "raw with minus", src: "A  {%- raw -%}  B  {%- endraw -%}  C", want: "ABC"},
	{name: "set tag line vanishes", src: "{% set x = 1 %}\n{{ x }}", want: "1"},
	{name: "braces in data", src: "a { b } {x} %} #} }}", want: "a { b } {x} %} #} }}"},
	{name: "newline inside a string literal", src: "{{ 'a\nb' }}", want: "a\nb"},
	{name: "for loop lines", src: "<\n{% for m in messages %}\n  {{ m.role }}\n{% endfor %}\n>", want: "<\n  system\n  user\n  assistant\n  user\n>"},
	{name: "nested indented blocks", src: "{% for i in [1, 2] %}\n    {% if i == 1 %}\n        one\n    {% else %}\n        other\n    {% endif %}\n{% endfor %}", want: "        one\n        other\n"},
	{name: "dict literal in a print tag", src: "{{ {'a': {'b': 1}}['a'] }}", want: "{'b': 1}"},
	{name: "variable minus before newline then block", src: "{{ 'a' -}}\n   {% if true %}b{% endif %}", want: "ab"},
}

func TestWhitespaceControl(t *testing.T) { runCases(t, whitespaceCases) }
