package chat

import (
	"fmt"
	"slices"
)

// Expression grammar, lowest precedence first (as jinja2.parser):
//
//	condexpr: or ("if" or ("else" condexpr)?)*
//	or:       and ("or" and)*
//	and:      not ("and" not)*
//	not:      "not" not | compare
//	compare:  math1 ((== != < <= > >= in "not in") math1)*
//	math1:    concat ((+ -) concat)*
//	concat:   math2 ("~" math2)*
//	math2:    pow ((* / // %) pow)*
//	pow:      unary ("**" unary)*
//	unary:    (- +) unary | primary postfix* (filter | test | call)*

// parseTuple parses one expression, or a tuple if commas follow.
// simplified restricts items to primaries (assignment targets).
func (p *parser) parseTuple(simplified, withCondexpr bool, extraEnd []string, explicitParens bool) (expr, error) {
	line := p.cur().line
	var items []expr
	isTuple := false
	for {
		if len(items) > 0 {
			if _, err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		if p.isTupleEnd(extraEnd) {
			break
		}
		var e expr
		var err error
		if simplified {
			e, err = p.parsePrimary()
		} else {
			e, err = p.parseExpression(withCondexpr)
		}
		if err != nil {
			return nil, err
		}
		items = append(items, e)
		if !p.isOp(",") {
			break
		}
		isTuple = true
		line = p.cur().line
	}
	if !isTuple {
		if len(items) > 0 {
			return items[0], nil
		}
		if !explicitParens {
			return nil, p.unexpected("an expression")
		}
	}
	return &tupleExpr{line: line, items: items}, nil
}

func (p *parser) isTupleEnd(extraEnd []string) bool {
	t := p.cur()
	switch {
	case t.kind == tokVarEnd, t.kind == tokBlockEnd, t.kind == tokEOF:
		return true
	case t.kind == tokOp && t.val == ")":
		return true
	case t.kind == tokName && slices.Contains(extraEnd, t.val):
		return true
	}
	return false
}

func (p *parser) parseExpression(withCondexpr bool) (expr, error) {
	if withCondexpr {
		return p.parseCondexpr()
	}
	return p.parseOr()
}

func (p *parser) parseCondexpr() (expr, error) {
	line := p.cur().line
	e1, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.isName("if") {
		p.next()
		e2, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		var e3 expr
		if p.isName("else") {
			p.next()
			if err := p.enter(); err != nil {
				return nil, err
			}
			e3, err = p.parseCondexpr()
			p.leave()
			if err != nil {
				return nil, err
			}
		}
		e1 = &condExpr{line: line, test: e2, yes: e1, not: e3}
		line = p.cur().line
	}
	return e1, nil
}

func (p *parser) parseOr() (expr, error) {
	line := p.cur().line
	left, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	for p.isName("or") {
		p.next()
		right, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		left = &orExpr{line: line, l: left, r: right}
		line = p.cur().line
	}
	return left, nil
}

func (p *parser) parseAnd() (expr, error) {
	line := p.cur().line
	left, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	for p.isName("and") {
		p.next()
		right, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		left = &andExpr{line: line, l: left, r: right}
		line = p.cur().line
	}
	return left, nil
}

func (p *parser) parseNot() (expr, error) {
	if p.isName("not") {
		line := p.next().line
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer p.leave()
		x, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &notExpr{line: line, x: x}, nil
	}
	return p.parseCompare()
}

var compareOps = []string{"==", "!=", "<", "<=", ">", ">="}

func (p *parser) parseCompare() (expr, error) {
	line := p.cur().line
	first, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	var ops []cmpOperand
	for {
		t := p.cur()
		op := ""
		switch {
		case t.kind == tokOp && slices.Contains(compareOps, t.val):
			p.next()
			op = t.val
		case p.isName("in"):
			p.next()
			op = "in"
		case p.isName("not") && p.look().kind == tokName && p.look().val == "in":
			p.next()
			p.next()
			op = "notin"
		}
		if op == "" {
			break
		}
		x, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		ops = append(ops, cmpOperand{op: op, x: x})
		line = p.cur().line
	}
	if len(ops) == 0 {
		return first, nil
	}
	return &compareExpr{line: line, first: first, ops: ops}, nil
}

func (p *parser) parseMath1() (expr, error) {
	left, err := p.parseConcat()
	if err != nil {
		return nil, err
	}
	for p.isOp("+") || p.isOp("-") {
		t := p.next()
		right, err := p.parseConcat()
		if err != nil {
			return nil, err
		}
		left = &binExpr{line: t.line, op: t.val, l: left, r: right}
	}
	return left, nil
}

func (p *parser) parseConcat() (expr, error) {
	line := p.cur().line
	first, err := p.parseMath2()
	if err != nil {
		return nil, err
	}
	parts := []expr{first}
	for p.isOp("~") {
		p.next()
		x, err := p.parseMath2()
		if err != nil {
			return nil, err
		}
		parts = append(parts, x)
	}
	if len(parts) == 1 {
		return first, nil
	}
	return &concatExpr{line: line, parts: parts}, nil
}

func (p *parser) parseMath2() (expr, error) {
	left, err := p.parsePow()
	if err != nil {
		return nil, err
	}
	for p.isOp("*") || p.isOp("/") || p.isOp("//") || p.isOp("%") {
		t := p.next()
		right, err := p.parsePow()
		if err != nil {
			return nil, err
		}
		left = &binExpr{line: t.line, op: t.val, l: left, r: right}
	}
	return left, nil
}

func (p *parser) parsePow() (expr, error) {
	left, err := p.parseUnary(true)
	if err != nil {
		return nil, err
	}
	for p.isOp("**") {
		t := p.next()
		right, err := p.parseUnary(true)
		if err != nil {
			return nil, err
		}
		left = &binExpr{line: t.line, op: "**", l: left, r: right}
	}
	return left, nil
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	t := p.cur()
	var e expr
	var err error
	if p.isOp("-") || p.isOp("+") {
		p.next()
		x, err := p.parseUnary(false)
		if err != nil {
			return nil, err
		}
		e = &unaryExpr{line: t.line, op: t.val, x: x}
	} else if e, err = p.parsePrimary(); err != nil {
		return nil, err
	}
	if e, err = p.parsePostfix(e); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterExpr(e)
	}
	return e, nil
}

func (p *parser) parsePrimary() (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	t := p.cur()
	switch t.kind {
	case tokName:
		p.next()
		switch t.val {
		case "true", "True":
			return &constExpr{line: t.line, val: true}, nil
		case "false", "False":
			return &constExpr{line: t.line, val: false}, nil
		case "none", "None":
			return &constExpr{line: t.line, val: nil}, nil
		}
		return &nameExpr{line: t.line, name: t.val}, nil
	case tokString:
		p.next()
		s := t.val
		for p.cur().kind == tokString {
			s += p.next().val
		}
		return &constExpr{line: t.line, val: s}, nil
	case tokInt, tokFloat:
		p.next()
		return &constExpr{line: t.line, val: t.num}, nil
	case tokOp:
		switch t.val {
		case "(":
			p.next()
			e, err := p.parseTuple(false, true, nil, true)
			if err != nil {
				return nil, err
			}
			if _, err := p.expectOp(")"); err != nil {
				return nil, err
			}
			return e, nil
		case "[":
			return p.parseList()
		case "{":
			return p.parseDict()
		}
	}
	return nil, p.failf(t.line, "unexpected %s", pyStrRepr(t.describe()))
}

func (p *parser) parseList() (expr, error) {
	t := p.next()
	e := &listExpr{line: t.line}
	for !p.isOp("]") {
		if len(e.items) > 0 {
			if _, err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		if p.isOp("]") {
			break
		}
		x, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		e.items = append(e.items, x)
	}
	p.next()
	return e, nil
}

func (p *parser) parseDict() (expr, error) {
	t := p.next()
	e := &dictExpr{line: t.line}
	for !p.isOp("}") {
		if len(e.keys) > 0 {
			if _, err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		if p.isOp("}") {
			break
		}
		k, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		if _, err := p.expectOp(":"); err != nil {
			return nil, err
		}
		v, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		e.keys = append(e.keys, k)
		e.vals = append(e.vals, v)
	}
	p.next()
	return e, nil
}

func (p *parser) parsePostfix(e expr) (expr, error) {
	for {
		var err error
		switch {
		case p.isOp(".") || p.isOp("["):
			e, err = p.parseSubscript(e)
		case p.isOp("("):
			e, err = p.parseCall(e)
		default:
			return e, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (p *parser) parseFilterExpr(e expr) (expr, error) {
	for {
		var err error
		switch {
		case p.isOp("|"):
			e, err = p.parseOneFilter(e)
		case p.isName("is"):
			e, err = p.parseTest(e)
		case p.isOp("("):
			e, err = p.parseCall(e)
		default:
			return e, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (p *parser) parseSubscript(e expr) (expr, error) {
	t := p.next()
	if t.val == "." {
		a := p.next()
		switch a.kind {
		case tokName:
			return &getattrExpr{line: t.line, obj: e, attr: a.val}, nil
		case tokInt:
			return &getitemExpr{line: t.line, obj: e, key: &constExpr{line: a.line, val: a.num}}, nil
		}
		return nil, p.failf(a.line, "expected name or number")
	}
	var args []expr
	for !p.isOp("]") {
		if len(args) > 0 {
			if _, err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		a, err := p.parseSubscribed()
		if err != nil {
			return nil, err
		}
		args = append(args, a)
	}
	p.next()
	if len(args) == 1 {
		return &getitemExpr{line: t.line, obj: e, key: args[0]}, nil
	}
	return &getitemExpr{line: t.line, obj: e, key: &tupleExpr{line: t.line, items: args}}, nil
}

// parseSubscribed parses one subscript: an expression or a slice a:b:c.
func (p *parser) parseSubscribed() (expr, error) {
	line := p.cur().line
	var parts []expr
	if p.isOp(":") {
		p.next()
		parts = []expr{nil}
	} else {
		e, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		if !p.isOp(":") {
			return e, nil
		}
		p.next()
		parts = []expr{e}
	}
	stopOrStep := func() (expr, error) {
		if p.isOp("]") || p.isOp(",") {
			return nil, nil
		}
		return p.parseExpression(true)
	}
	if p.isOp(":") {
		parts = append(parts, nil)
	} else {
		e, err := stopOrStep()
		if err != nil {
			return nil, err
		}
		parts = append(parts, e)
	}
	if p.isOp(":") {
		p.next()
		e, err := stopOrStep()
		if err != nil {
			return nil, err
		}
		parts = append(parts, e)
	} else {
		parts = append(parts, nil)
	}
	return &sliceExpr{line: line, start: parts[0], stop: parts[1], step: parts[2]}, nil
}

func (p *parser) parseCall(fn expr) (expr, error) {
	line := p.cur().line
	args, kwargs, err := p.parseCallArgs()
	if err != nil {
		return nil, err
	}
	return &callExpr{line: line, fn: fn, args: args, kwargs: kwargs}, nil
}

func (p *parser) parseCallArgs() ([]expr, []kwExpr, error) {
	open, err := p.expectOp("(")
	if err != nil {
		return nil, nil, err
	}
	var args []expr
	var kwargs []kwExpr
	requireComma := false
	for !p.isOp(")") {
		if requireComma {
			if _, err := p.expectOp(","); err != nil {
				return nil, nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		switch {
		case p.isOp("*") || p.isOp("**"):
			return nil, nil, &UnsupportedError{Line: p.cur().line, Construct: "*args/**kwargs in a call"}
		case p.cur().kind == tokName && p.look().kind == tokOp && p.look().val == "=":
			key := p.next().val
			p.next()
			v, err := p.parseExpression(true)
			if err != nil {
				return nil, nil, err
			}
			kwargs = append(kwargs, kwExpr{name: key, val: v})
		default:
			if len(kwargs) > 0 {
				return nil, nil, p.failf(open.line, "invalid syntax for function call expression")
			}
			v, err := p.parseExpression(true)
			if err != nil {
				return nil, nil, err
			}
			args = append(args, v)
		}
		requireComma = true
	}
	p.next()
	return args, kwargs, nil
}

// parseOneFilter parses "| name(args)" applied to e (nil in set blocks).
func (p *parser) parseOneFilter(e expr) (*filterExpr, error) {
	p.next() // |
	nt, err := p.expectName()
	if err != nil {
		return nil, err
	}
	name := nt.val
	for p.isOp(".") {
		p.next()
		n2, err := p.expectName()
		if err != nil {
			return nil, err
		}
		name += "." + n2.val
	}
	if _, ok := filters[name]; !ok {
		return nil, &UnsupportedError{Line: nt.line, Construct: describeUnknown("filter", name, unsupportedFilters)}
	}
	f := &filterExpr{line: nt.line, arg: e, name: name}
	if p.isOp("(") {
		if f.args, f.kwargs, err = p.parseCallArgs(); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (p *parser) parseTest(e expr) (expr, error) {
	is := p.next()
	negated := false
	if p.isName("not") {
		p.next()
		negated = true
	}
	nt, err := p.expectName()
	if err != nil {
		return nil, err
	}
	name := nt.val
	for p.isOp(".") {
		p.next()
		n2, err := p.expectName()
		if err != nil {
			return nil, err
		}
		name += "." + n2.val
	}
	if _, ok := tests[name]; !ok {
		return nil, &UnsupportedError{Line: nt.line, Construct: describeUnknown("test", name, unsupportedTests)}
	}
	te := &testExpr{line: is.line, arg: e, name: name}
	c := p.cur()
	argStart := c.kind == tokName || c.kind == tokString || c.kind == tokInt || c.kind == tokFloat ||
		(c.kind == tokOp && (c.val == "[" || c.val == "{"))
	switch {
	case p.isOp("("):
		if te.args, te.kwargs, err = p.parseCallArgs(); err != nil {
			return nil, err
		}
	case argStart && !p.isName("else") && !p.isName("or") && !p.isName("and"):
		if p.isName("is") {
			return nil, p.failf(c.line, "You cannot chain multiple tests with is")
		}
		a, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		if a, err = p.parsePostfix(a); err != nil {
			return nil, err
		}
		te.args = []expr{a}
	}
	if negated {
		return &notExpr{line: is.line, x: te}, nil
	}
	return te, nil
}

// describeUnknown names a refused filter or test, saying whether Jinja
// itself has it.
func describeUnknown(kind, name string, jinjaBuiltins []string) string {
	if slices.Contains(jinjaBuiltins, name) {
		return fmt.Sprintf("%s '%s' (a Jinja built-in outside the supported subset)", kind, name)
	}
	return fmt.Sprintf("%s '%s' (not a Jinja or transformers %s)", kind, name, kind)
}
