package ir

import (
	"fmt"
	"strconv"

	"github.com/chorus-rt/chorus/compiler/vdevice"
	"github.com/chorus-rt/chorus/tensor"
)

type tokKind uint8

const (
	tEOF    tokKind = iota
	tIdent          // module, sum, float16, ...
	tValue          // %name (text holds the name)
	tGlobal         // @name (text holds the name)
	tInt            // -12
	tFloat          // -1.5, 1e-05, 10000.0
	tString         // "..." (text holds the unquoted value)
	tPunct          // one of ( ) { } [ ] < > , : = ?
)

type token struct {
	kind tokKind
	text string
	pos  Pos
}

func (t token) String() string {
	switch t.kind {
	case tEOF:
		return "end of input"
	case tValue:
		return "%" + t.text
	case tGlobal:
		return "@" + t.text
	case tString:
		return strconv.Quote(t.text)
	}
	return strconv.Quote(t.text)
}

type lexer struct {
	src       string
	off       int
	line, col int
}

func (l *lexer) errorf(p Pos, format string, args ...any) error {
	return &ParseError{Pos: p, Msg: fmt.Sprintf(format, args...)}
}

func (l *lexer) advance(n int) {
	for i := 0; i < n; i++ {
		if l.src[l.off] == '\n' {
			l.line++
			l.col = 1
		} else {
			l.col++
		}
		l.off++
	}
}

func (l *lexer) next() (token, error) {
	// Skip blanks and // comments.
	for l.off < len(l.src) {
		c := l.src[l.off]
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			l.advance(1)
		} else if c == '/' && l.off+1 < len(l.src) && l.src[l.off+1] == '/' {
			for l.off < len(l.src) && l.src[l.off] != '\n' {
				l.advance(1)
			}
		} else {
			break
		}
	}
	pos := Pos{l.line, l.col}
	if l.off >= len(l.src) {
		return token{kind: tEOF, pos: pos}, nil
	}
	c := l.src[l.off]
	name := func(start int) string {
		end := start
		for end < len(l.src) && isNameByte(l.src[end]) {
			end++
		}
		return l.src[start:end]
	}
	switch {
	case c == '%' || c == '@':
		n := name(l.off + 1)
		if n == "" {
			return token{}, l.errorf(pos, "expected a name after %q", c)
		}
		l.advance(1 + len(n))
		if c == '%' {
			return token{tValue, n, pos}, nil
		}
		return token{tGlobal, n, pos}, nil
	case c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'):
		n := name(l.off)
		l.advance(len(n))
		return token{tIdent, n, pos}, nil
	case c == '-' || (c >= '0' && c <= '9'):
		end := l.off + 1
		for end < len(l.src) && l.src[end] >= '0' && l.src[end] <= '9' {
			end++
		}
		if end == l.off+1 && c == '-' {
			return token{}, l.errorf(pos, "expected digits after '-'")
		}
		digits := func(i int) int {
			for i < len(l.src) && l.src[i] >= '0' && l.src[i] <= '9' {
				i++
			}
			return i
		}
		kind := tInt
		if end+1 < len(l.src) && l.src[end] == '.' && l.src[end+1] >= '0' && l.src[end+1] <= '9' {
			kind, end = tFloat, digits(end+1)
		}
		if end < len(l.src) && (l.src[end] == 'e' || l.src[end] == 'E') {
			i := end + 1
			if i < len(l.src) && (l.src[i] == '-' || l.src[i] == '+') {
				i++
			}
			if j := digits(i); j > i {
				kind, end = tFloat, j
			}
		}
		text := l.src[l.off:end]
		if end < len(l.src) && isNameByte(l.src[end]) {
			return token{}, l.errorf(pos, "bad number %q", l.src[l.off:end+1])
		}
		l.advance(len(text))
		return token{kind, text, pos}, nil
	case c == '"':
		end := l.off + 1
		for end < len(l.src) && l.src[end] != '"' && l.src[end] != '\n' {
			if l.src[end] == '\\' {
				end++
			}
			end++
		}
		if end >= len(l.src) || l.src[end] != '"' {
			return token{}, l.errorf(pos, "unterminated string")
		}
		s, err := strconv.Unquote(l.src[l.off : end+1])
		if err != nil {
			return token{}, l.errorf(pos, "bad string %s", l.src[l.off:end+1])
		}
		l.advance(end + 1 - l.off)
		return token{tString, s, pos}, nil
	}
	switch c {
	case '(', ')', '{', '}', '[', ']', '<', '>', ',', ':', '=', '?':
		l.advance(1)
		return token{tPunct, string(c), pos}, nil
	}
	return token{}, l.errorf(pos, "unexpected character %q", c)
}

type parser struct {
	lex lexer
	tok token // current token
}

// Parse reads a module in the text format. Syntax errors are *ParseError
// values (wrapping ErrSyntax) that give line:column. Parse checks syntax
// only; run Verify for well-formedness.
func Parse(src string) (*Module, error) {
	p := &parser{lex: lexer{src: src, line: 1, col: 1}}
	if err := p.advance(); err != nil {
		return nil, err
	}
	return p.module()
}

func (p *parser) advance() error {
	t, err := p.lex.next()
	if err != nil {
		return err
	}
	p.tok = t
	return nil
}

func (p *parser) errorf(format string, args ...any) error {
	return p.lex.errorf(p.tok.pos, format, args...)
}

func (p *parser) is(kind tokKind, text string) bool {
	return p.tok.kind == kind && (text == "" || p.tok.text == text)
}

func (p *parser) isPunct(s string) bool { return p.is(tPunct, s) }

// expect consumes a token of the kind (and text, if not empty).
func (p *parser) expect(kind tokKind, text string, what string) (token, error) {
	if !p.is(kind, text) {
		return token{}, p.errorf("expected %s, found %v", what, p.tok)
	}
	t := p.tok
	return t, p.advance()
}

func (p *parser) punct(s string) error {
	_, err := p.expect(tPunct, s, strconv.Quote(s))
	return err
}

func (p *parser) module() (*Module, error) {
	if _, err := p.expect(tIdent, "module", `"module"`); err != nil {
		return nil, err
	}
	name, err := p.expect(tGlobal, "", "@name")
	if err != nil {
		return nil, err
	}
	m := &Module{Name: name.text}
	for !p.is(tEOF, "") {
		f, err := p.function()
		if err != nil {
			return nil, err
		}
		m.Funcs = append(m.Funcs, f)
	}
	return m, nil
}

func (p *parser) function() (*Function, error) {
	kw, err := p.expect(tIdent, "func", `"func"`)
	if err != nil {
		return nil, err
	}
	name, err := p.expect(tGlobal, "", "@name")
	if err != nil {
		return nil, err
	}
	f := &Function{Name: name.text, Pos: kw.pos}
	if err := p.punct("("); err != nil {
		return nil, err
	}
	for !p.isPunct(")") {
		if len(f.Params) > 0 {
			if err := p.punct(","); err != nil {
				return nil, err
			}
		}
		v, err := p.expect(tValue, "", "%parameter")
		if err != nil {
			return nil, err
		}
		if err := p.punct(":"); err != nil {
			return nil, err
		}
		t, err := p.typ()
		if err != nil {
			return nil, err
		}
		f.Params = append(f.Params, Param{Name: v.text, Type: t, Pos: v.pos})
	}
	if err := p.advance(); err != nil {
		return nil, err
	}
	if err := p.punct("{"); err != nil {
		return nil, err
	}
	for p.is(tIdent, "block") {
		if err := p.advance(); err != nil {
			return nil, err
		}
		if err := p.punct("{"); err != nil {
			return nil, err
		}
		blk := &Block{}
		for !p.isPunct("}") {
			b, err := p.binding()
			if err != nil {
				return nil, err
			}
			blk.Bindings = append(blk.Bindings, b)
		}
		if err := p.advance(); err != nil {
			return nil, err
		}
		f.Blocks = append(f.Blocks, blk)
	}
	if _, err := p.expect(tIdent, "return", `"block" or "return"`); err != nil {
		return nil, err
	}
	for p.is(tValue, "") {
		f.Results = append(f.Results, Ref(p.tok.text))
		if err := p.advance(); err != nil {
			return nil, err
		}
		if !p.isPunct(",") {
			break
		}
		if err := p.advance(); err != nil {
			return nil, err
		}
		if !p.is(tValue, "") {
			return nil, p.errorf("expected %%value after ',', found %v", p.tok)
		}
	}
	if err := p.punct("}"); err != nil {
		return nil, err
	}
	return f, nil
}

func (p *parser) binding() (*Binding, error) {
	b := &Binding{Pos: p.tok.pos}
	if p.is(tValue, "") {
		b.Result = p.tok.text
		if err := p.advance(); err != nil {
			return nil, err
		}
		if err := p.punct("="); err != nil {
			return nil, err
		}
	}
	switch {
	case p.is(tValue, "") && b.Result != "":
		b.Op, b.Args = OpAlias, []Arg{Ref(p.tok.text)}
		if err := p.advance(); err != nil {
			return nil, err
		}
	case p.is(tIdent, ""):
		op, ok := OpByName(p.tok.text)
		if !ok {
			return nil, p.errorf("%v: %q", ErrUnknownOp, p.tok.text)
		}
		b.Op = op
		if err := p.advance(); err != nil {
			return nil, err
		}
		args, err := p.args()
		if err != nil {
			return nil, err
		}
		b.Args = args
		if _, first := b.Ref(0); op == OpAllocTensor && first {
			b.Op = OpAllocTensorView
		}
	default:
		return nil, p.errorf("expected an op, found %v", p.tok)
	}
	if p.isPunct(":") {
		if b.Result == "" {
			return nil, p.errorf("a type annotation needs a result (%%name = ...)")
		}
		if err := p.advance(); err != nil {
			return nil, err
		}
		t, err := p.typ()
		if err != nil {
			return nil, err
		}
		b.Type = t
	} else if b.Result != "" {
		return nil, p.errorf("expected \": type\" after the definition of %%%s, found %v", b.Result, p.tok)
	}
	return b, nil
}

func (p *parser) args() ([]Arg, error) {
	if err := p.punct("("); err != nil {
		return nil, err
	}
	args := []Arg{}
	for !p.isPunct(")") {
		if len(args) > 0 {
			if err := p.punct(","); err != nil {
				return nil, err
			}
		}
		a, err := p.arg()
		if err != nil {
			return nil, err
		}
		args = append(args, a)
	}
	return args, p.advance()
}

func (p *parser) arg() (Arg, error) {
	t := p.tok
	switch {
	case t.kind == tValue:
		return Ref(t.text), p.advance()
	case t.kind == tInt:
		n, err := strconv.ParseInt(t.text, 10, 64)
		if err != nil {
			return nil, p.errorf("integer %s out of range", t.text)
		}
		return Int(n), p.advance()
	case t.kind == tFloat:
		f, err := strconv.ParseFloat(t.text, 64)
		if err != nil {
			return nil, p.errorf("number %s out of range", t.text)
		}
		return Float(f), p.advance()
	case t.kind == tString:
		return Str(t.text), p.advance()
	case t.kind == tIdent:
		var a Arg = Sym(t.text)
		switch {
		case t.text == "true" || t.text == "false":
			a = Bool(t.text == "true")
		case dtypeByName(t.text) != tensor.Invalid:
			a = DTypeLit(dtypeByName(t.text))
		}
		return a, p.advance()
	case p.isPunct("["):
		return p.list()
	case p.isPunct("{"):
		v, err := p.vd()
		return VDLit(v), err
	}
	return nil, p.errorf("expected an argument, found %v", t)
}

// dtypeByName accepts only canonical dtype names, so that printing gives
// back what was parsed.
func dtypeByName(s string) tensor.DType {
	for _, d := range tensor.DTypes {
		if d.String() == s {
			return d
		}
	}
	return tensor.Invalid
}

// list reads [ ... ]: a shape when every element is an integer, Floats
// when any is written as a float (Floats print every element that way).
func (p *parser) list() (Arg, error) {
	save := *p
	s, err := p.shape()
	if err == nil {
		return ShapeLit(s), nil
	}
	*p = save
	if err := p.punct("["); err != nil {
		return nil, err
	}
	fs := Floats{}
	for !p.isPunct("]") {
		if len(fs) > 0 {
			if err := p.punct(","); err != nil {
				return nil, err
			}
		}
		t := p.tok
		if t.kind != tFloat && t.kind != tInt {
			return nil, p.errorf("expected a number in a list, found %v", t)
		}
		f, perr := strconv.ParseFloat(t.text, 64)
		if perr != nil {
			return nil, p.lex.errorf(t.pos, "number %s out of range", t.text)
		}
		fs = append(fs, f)
		if err := p.advance(); err != nil {
			return nil, err
		}
	}
	return fs, p.advance()
}

func (p *parser) shape() (tensor.Shape, error) {
	if err := p.punct("["); err != nil {
		return nil, err
	}
	s := tensor.Shape{}
	for !p.isPunct("]") {
		if len(s) > 0 {
			if err := p.punct(","); err != nil {
				return nil, err
			}
		}
		if len(s) >= tensor.MaxDims {
			return nil, p.errorf("shape has more than %d dims", tensor.MaxDims)
		}
		t, err := p.expect(tInt, "", "a dimension")
		if err != nil {
			return nil, err
		}
		n, err := strconv.ParseInt(t.text, 10, 64)
		if err != nil || n < 0 {
			return nil, p.lex.errorf(t.pos, "bad dimension %s", t.text)
		}
		s = append(s, n)
	}
	return s, p.advance()
}

func (p *parser) typ() (Type, error) {
	t, err := p.expect(tIdent, "", "a type")
	if err != nil {
		return nil, err
	}
	switch t.text {
	case "object":
		return ObjectType{}, nil
	case "storage":
		st := StorageType{}
		if !p.isPunct("<") {
			return st, nil
		}
		if err := p.advance(); err != nil {
			return nil, err
		}
		if st.Device, err = p.vd(); err != nil {
			return nil, err
		}
		return st, p.punct(">")
	case "tensor":
		if err := p.punct("<"); err != nil {
			return nil, err
		}
		tt := TensorType{}
		if tt.Shape, err = p.shape(); err != nil {
			return nil, err
		}
		if err := p.punct(","); err != nil {
			return nil, err
		}
		dt, err := p.expect(tIdent, "", "a dtype")
		if err != nil {
			return nil, err
		}
		if tt.DType = dtypeByName(dt.text); tt.DType == tensor.Invalid {
			return nil, p.lex.errorf(dt.pos, "unknown dtype %q", dt.text)
		}
		if p.isPunct(",") {
			if err := p.advance(); err != nil {
				return nil, err
			}
			if tt.Device, err = p.vd(); err != nil {
				return nil, err
			}
		}
		return tt, p.punct(">")
	}
	return nil, p.lex.errorf(t.pos, "unknown type %q (want tensor, storage or object)", t.text)
}

// vd parses {cuda:0 target=cuda(arch="sm_90") scope="global"}; every part
// is optional, "?" stands for an unconstrained device type.
func (p *parser) vd() (vdevice.VirtualDevice, error) {
	start := p.tok.pos
	var none vdevice.VirtualDevice
	if err := p.punct("{"); err != nil {
		return none, err
	}
	dt, id := vdevice.NoDeviceType, -1
	var target *vdevice.Target
	scope := ""
	if p.isPunct("?") || p.is(tIdent, "cpu") || p.is(tIdent, "cuda") {
		dt, _ = vdevice.ParseDeviceType(p.tok.text)
		if err := p.advance(); err != nil {
			return none, err
		}
		if p.isPunct(":") {
			if err := p.advance(); err != nil {
				return none, err
			}
			t, err := p.expect(tInt, "", "a device id")
			if err != nil {
				return none, err
			}
			n, err := strconv.Atoi(t.text)
			if err != nil || n < 0 || n > 1<<30 {
				return none, p.lex.errorf(t.pos, "bad device id %s", t.text)
			}
			id = n
		} else if dt == vdevice.NoDeviceType {
			return none, p.errorf(`expected ":id" after "?"`)
		}
	}
	for !p.isPunct("}") {
		key, err := p.expect(tIdent, "", `"target=", "scope=" or "}"`)
		if err != nil {
			return none, err
		}
		if err := p.punct("="); err != nil {
			return none, err
		}
		switch {
		case key.text == "target" && target == nil:
			if target, err = p.target(); err != nil {
				return none, err
			}
		case key.text == "scope" && scope == "":
			s, err := p.expect(tString, "", "a quoted scope")
			if err != nil {
				return none, err
			}
			if s.text == "" {
				return none, p.lex.errorf(s.pos, `empty scope (leave "scope=" out for an unconstrained scope)`)
			}
			scope = s.text
		default:
			return none, p.lex.errorf(key.pos, "unexpected or repeated %q in a virtual device", key.text)
		}
	}
	if err := p.advance(); err != nil {
		return none, err
	}
	v, err := vdevice.New(dt, id, target, scope)
	if err != nil {
		return none, p.lex.errorf(start, "%v", err)
	}
	return v, nil
}

func (p *parser) target() (*vdevice.Target, error) {
	kind, err := p.expect(tIdent, "", "a target kind")
	if err != nil {
		return nil, err
	}
	attrs := map[string]string{}
	if p.isPunct("(") {
		if err := p.advance(); err != nil {
			return nil, err
		}
		for !p.isPunct(")") {
			if len(attrs) > 0 {
				if err := p.punct(","); err != nil {
					return nil, err
				}
			}
			k, err := p.expect(tIdent, "", "an attribute name")
			if err != nil {
				return nil, err
			}
			if _, dup := attrs[k.text]; dup {
				return nil, p.lex.errorf(k.pos, "repeated target attribute %q", k.text)
			}
			if err := p.punct("="); err != nil {
				return nil, err
			}
			v, err := p.expect(tString, "", "a quoted attribute value")
			if err != nil {
				return nil, err
			}
			attrs[k.text] = v.text
		}
		if err := p.advance(); err != nil {
			return nil, err
		}
	}
	t, err := vdevice.NewTarget(kind.text, attrs)
	if err != nil {
		return nil, p.lex.errorf(kind.pos, "%v", err)
	}
	return t, nil
}

// ParseVirtualDevice parses a virtual device in the text form, for
// example {cuda:0 target=cuda(arch="sm_90") scope="global"}.
func ParseVirtualDevice(s string) (vdevice.VirtualDevice, error) {
	p := &parser{lex: lexer{src: s, line: 1, col: 1}}
	if err := p.advance(); err != nil {
		return vdevice.VirtualDevice{}, err
	}
	v, err := p.vd()
	if err != nil {
		return vdevice.VirtualDevice{}, err
	}
	if !p.is(tEOF, "") {
		return vdevice.VirtualDevice{}, p.errorf("unexpected %v after the virtual device", p.tok)
	}
	return v, nil
}
