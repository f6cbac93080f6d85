package chat

// Statements (template nodes).

type node interface{ nodeLine() int }

type dataNode struct {
	line int
	text string
}

type printNode struct {
	line int
	expr expr
}

type ifBranch struct {
	test expr
	body []node
}

type ifNode struct {
	line     int
	branches []ifBranch // if, then each elif
	orelse   []node
}

type forNode struct {
	line   int
	target target
	iter   expr
	filter expr // the `if` clause, or nil
	body   []node
	orelse []node
}

type setNode struct {
	line   int
	target target
	value  expr
}

// setBlockNode is {% set x %}...{% endset %}, with optional filters.
type setBlockNode struct {
	line    int
	target  target
	filters []*filterExpr // applied in order to the captured text
	body    []node
}

type loopCtrlNode struct {
	line int
	brk  bool // break, else continue
}

// generationNode is transformers' {% generation %} block: it renders its
// body unchanged.
type generationNode struct {
	line int
	body []node
}

func (n *dataNode) nodeLine() int       { return n.line }
func (n *printNode) nodeLine() int      { return n.line }
func (n *ifNode) nodeLine() int         { return n.line }
func (n *forNode) nodeLine() int        { return n.line }
func (n *setNode) nodeLine() int        { return n.line }
func (n *setBlockNode) nodeLine() int   { return n.line }
func (n *loopCtrlNode) nodeLine() int   { return n.line }
func (n *generationNode) nodeLine() int { return n.line }

// Assignment targets.

type target interface{ isTarget() }

type nameTarget struct{ name string }

type nsTarget struct{ name, attr string }

type tupleTarget struct{ items []target }

func (nameTarget) isTarget()  {}
func (nsTarget) isTarget()    {}
func (tupleTarget) isTarget() {}

// Expressions.

type expr interface{ exprLine() int }

type constExpr struct {
	line int
	val  Value
}

type nameExpr struct {
	line int
	name string
}

type getattrExpr struct {
	line int
	obj  expr
	attr string
}

type getitemExpr struct {
	line int
	obj  expr
	key  expr
}

type sliceExpr struct {
	line              int
	start, stop, step expr // nil when omitted
}

type callExpr struct {
	line   int
	fn     expr
	args   []expr
	kwargs []kwExpr
}

type kwExpr struct {
	name string
	val  expr
}

type filterExpr struct {
	line   int
	arg    expr // nil inside {% set %} blocks
	name   string
	args   []expr
	kwargs []kwExpr
}

type testExpr struct {
	line   int
	arg    expr
	name   string
	args   []expr
	kwargs []kwExpr
}

type binExpr struct {
	line int
	op   string // + - * / // % **
	l, r expr
}

type concatExpr struct {
	line  int
	parts []expr
}

type unaryExpr struct {
	line int
	op   string // - +
	x    expr
}

type notExpr struct {
	line int
	x    expr
}

type andExpr struct {
	line int
	l, r expr
}

type orExpr struct {
	line int
	l, r expr
}

type cmpOperand struct {
	op string // == != < <= > >= in notin
	x  expr
}

type compareExpr struct {
	line  int
	first expr
	ops   []cmpOperand
}

type condExpr struct {
	line           int
	test, yes, not expr // not may be nil
}

type listExpr struct {
	line  int
	items []expr
}

type tupleExpr struct {
	line  int
	items []expr
}

type dictExpr struct {
	line       int
	keys, vals []expr
}

func (e *constExpr) exprLine() int   { return e.line }
func (e *nameExpr) exprLine() int    { return e.line }
func (e *getattrExpr) exprLine() int { return e.line }
func (e *getitemExpr) exprLine() int { return e.line }
func (e *sliceExpr) exprLine() int   { return e.line }
func (e *callExpr) exprLine() int    { return e.line }
func (e *filterExpr) exprLine() int  { return e.line }
func (e *testExpr) exprLine() int    { return e.line }
func (e *binExpr) exprLine() int     { return e.line }
func (e *concatExpr) exprLine() int  { return e.line }
func (e *unaryExpr) exprLine() int   { return e.line }
func (e *notExpr) exprLine() int     { return e.line }
func (e *andExpr) exprLine() int     { return e.line }
func (e *orExpr) exprLine() int      { return e.line }
func (e *compareExpr) exprLine() int { return e.line }
func (e *condExpr) exprLine() int    { return e.line }
func (e *listExpr) exprLine() int    { return e.line }
func (e *tupleExpr) exprLine() int   { return e.line }
func (e *dictExpr) exprLine() int    { return e.line }
