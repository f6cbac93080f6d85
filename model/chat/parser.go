package chat

import (
	"fmt"
	"slices"
)

// The parser follows jinja2.parser: statements here, expressions in
// parse_expr.go.

// maxNesting bounds expression and block nesting so that hostile input
// cannot exhaust the stack.
const maxNesting = 200

type parser struct {
	toks      []token
	pos       int
	depth     int
	loopDepth int
}

func (p *parser) cur() token { return p.toks[p.pos] }

func (p *parser) look() token {
	if p.pos+1 < len(p.toks) {
		return p.toks[p.pos+1]
	}
	return p.toks[len(p.toks)-1]
}

func (p *parser) next() token {
	t := p.toks[p.pos]
	if p.pos < len(p.toks)-1 {
		p.pos++
	}
	return t
}

func (p *parser) isOp(op string) bool {
	t := p.cur()
	return t.kind == tokOp && t.val == op
}

func (p *parser) isName(name string) bool {
	t := p.cur()
	return t.kind == tokName && t.val == name
}

func (p *parser) failf(line int, format string, args ...any) error {
	return &SyntaxError{Line: line, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) unexpected(want string) error {
	t := p.cur()
	return p.failf(t.line, "expected %s, got %s", want, pyStrRepr(t.describe()))
}

func (p *parser) expectOp(op string) (token, error) {
	if !p.isOp(op) {
		return token{}, p.unexpected(pyStrRepr(op))
	}
	return p.next(), nil
}

func (p *parser) expectName() (token, error) {
	if p.cur().kind != tokName {
		return token{}, p.unexpected("name")
	}
	return p.next(), nil
}

func (p *parser) expectKind(kind tokenKind) error {
	if p.cur().kind != kind {
		return p.unexpected(pyStrRepr(token{kind: kind}.describe()))
	}
	p.next()
	return nil
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > maxNesting {
		return &UnsupportedError{Line: p.cur().line, Construct: fmt.Sprintf("nesting deeper than %d levels", maxNesting)}
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

// parseTemplate parses a whole template.
func parseTemplate(toks []token) ([]node, error) {
	p := &parser{toks: toks}
	return p.subparse(nil)
}

// endTags are the tags that close or split a block; they are errors where
// no block expects them.
var endTags = []string{"elif", "else", "endif", "endfor", "endset", "endgeneration", "endraw"}

// subparse parses template nodes until a block tag named in ends (left as
// the current token) or the end of the template.
func (p *parser) subparse(ends []string) ([]node, error) {
	var body []node
	for {
		t := p.cur()
		switch t.kind {
		case tokData:
			p.next()
			body = append(body, &dataNode{line: t.line, text: t.val})
		case tokVarBegin:
			p.next()
			e, err := p.parseTuple(false, true, nil, false)
			if err != nil {
				return nil, err
			}
			if err := p.expectKind(tokVarEnd); err != nil {
				return nil, err
			}
			body = append(body, &printNode{line: t.line, expr: e})
		case tokBlockBegin:
			p.next()
			if c := p.cur(); ends != nil && c.kind == tokName && slices.Contains(ends, c.val) {
				return body, nil
			}
			n, err := p.parseStatement()
			if err != nil {
				return nil, err
			}
			body = append(body, n)
			if err := p.expectKind(tokBlockEnd); err != nil {
				return nil, err
			}
		case tokEOF:
			if ends != nil {
				return nil, p.failf(t.line, "unexpected end of template, expected %s", quoteList(ends))
			}
			return body, nil
		default:
			return nil, p.failf(t.line, "unexpected %s", pyStrRepr(t.describe()))
		}
	}
}

func quoteList(names []string) string {
	s := ""
	for i, n := range names {
		if i > 0 {
			s += " or "
		}
		s += "'" + n + "'"
	}
	return s
}

// parseStatements parses the rest of a block header and its body up to one
// of ends; with drop it also consumes the end tag's name.
func (p *parser) parseStatements(ends []string, drop bool) ([]node, error) {
	if p.isOp(":") {
		p.next()
	}
	if err := p.expectKind(tokBlockEnd); err != nil {
		return nil, err
	}
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	body, err := p.subparse(ends)
	if err != nil {
		return nil, err
	}
	if drop {
		p.next()
	}
	return body, nil
}

func (p *parser) parseStatement() (node, error) {
	t := p.cur()
	if t.kind != tokName {
		return nil, p.failf(t.line, "tag name expected")
	}
	switch t.val {
	case "if":
		return p.parseIf()
	case "for":
		return p.parseFor()
	case "set":
		return p.parseSet()
	case "break", "continue":
		if p.loopDepth == 0 {
			return nil, p.failf(t.line, "'%s' outside of a for loop", t.val)
		}
		p.next()
		return &loopCtrlNode{line: t.line, brk: t.val == "break"}, nil
	case "generation":
		p.next()
		body, err := p.parseStatements([]string{"endgeneration"}, true)
		if err != nil {
			return nil, err
		}
		return &generationNode{line: t.line, body: body}, nil
	}
	if slices.Contains(endTags, t.val) {
		return nil, p.failf(t.line, "unexpected tag '%s'", t.val)
	}
	return nil, &UnsupportedError{Line: t.line, Construct: fmt.Sprintf("tag '%s'", t.val)}
}

func (p *parser) parseIf() (node, error) {
	n := &ifNode{line: p.next().line}
	for {
		test, err := p.parseTuple(false, false, nil, false)
		if err != nil {
			return nil, err
		}
		body, err := p.parseStatements([]string{"elif", "else", "endif"}, false)
		if err != nil {
			return nil, err
		}
		n.branches = append(n.branches, ifBranch{test: test, body: body})
		switch p.next().val {
		case "elif":
			continue
		case "else":
			n.orelse, err = p.parseStatements([]string{"endif"}, true)
			if err != nil {
				return nil, err
			}
		}
		return n, nil
	}
}

func (p *parser) parseFor() (node, error) {
	n := &forNode{line: p.next().line}
	var err error
	if n.target, err = p.parseAssignTarget([]string{"in"}, false); err != nil {
		return nil, err
	}
	if !p.isName("in") {
		return nil, p.unexpected("'in'")
	}
	p.next()
	if n.iter, err = p.parseTuple(false, false, []string{"recursive"}, false); err != nil {
		return nil, err
	}
	if p.isName("if") {
		p.next()
		if n.filter, err = p.parseExpression(true); err != nil {
			return nil, err
		}
	}
	if p.isName("recursive") {
		return nil, &UnsupportedError{Line: p.cur().line, Construct: "recursive for loop"}
	}
	p.loopDepth++
	n.body, err = p.parseStatements([]string{"endfor", "else"}, false)
	p.loopDepth--
	if err != nil {
		return nil, err
	}
	if p.next().val == "else" {
		// break/continue in the else block act on an enclosing loop.
		n.orelse, err = p.parseStatements([]string{"endfor"}, true)
		if err != nil {
			return nil, err
		}
	}
	return n, nil
}

func (p *parser) parseSet() (node, error) {
	line := p.next().line
	tgt, err := p.parseAssignTarget(nil, true)
	if err != nil {
		return nil, err
	}
	if p.isOp("=") {
		p.next()
		val, err := p.parseTuple(false, true, nil, false)
		if err != nil {
			return nil, err
		}
		return &setNode{line: line, target: tgt, value: val}, nil
	}
	n := &setBlockNode{line: line, target: tgt}
	for p.isOp("|") {
		f, err := p.parseOneFilter(nil)
		if err != nil {
			return nil, err
		}
		n.filters = append(n.filters, f)
	}
	if n.body, err = p.parseStatements([]string{"endset"}, true); err != nil {
		return nil, err
	}
	return n, nil
}

// parseAssignTarget parses the left side of set or for.
func (p *parser) parseAssignTarget(extraEnd []string, withNamespace bool) (target, error) {
	if withNamespace && p.look().kind == tokOp && p.look().val == "." {
		name, err := p.expectName()
		if err != nil {
			return nil, err
		}
		p.next()
		attr, err := p.expectName()
		if err != nil {
			return nil, err
		}
		return nsTarget{name: name.val, attr: attr.val}, nil
	}
	e, err := p.parseTuple(true, true, extraEnd, false)
	if err != nil {
		return nil, err
	}
	return toTarget(e)
}

func toTarget(e expr) (target, error) {
	switch e := e.(type) {
	case *nameExpr:
		return nameTarget{name: e.name}, nil
	case *tupleExpr:
		t := tupleTarget{}
		for _, it := range e.items {
			sub, err := toTarget(it)
			if err != nil {
				return nil, err
			}
			t.items = append(t.items, sub)
		}
		return t, nil
	}
	return nil, &SyntaxError{Line: e.exprLine(), Msg: "can't assign to this expression"}
}
