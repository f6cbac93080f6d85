package reduce

import (
	"errors"
	"fmt"
	"strings"

	"github.com/chorus-rt/chorus/tensor"
)

// Op is a reduction operator. The numeric values are stable (they may
// travel in messages): never renumber them.
type Op uint8

const (
	Sum  Op = 0
	Prod Op = 1
	Min  Op = 2
	Max  Op = 3
	Avg  Op = 4
)

// Ops lists every valid Op in numeric order; tests iterate over it.
var Ops = []Op{Sum, Prod, Min, Max, Avg}

var opNames = [...]string{Sum: "sum", Prod: "prod", Min: "min", Max: "max", Avg: "avg"}

// Valid reports whether op is one of the defined operators.
func (op Op) Valid() bool { return op <= Avg }

func (op Op) String() string {
	if op.Valid() {
		return opNames[op]
	}
	return fmt.Sprintf("op(%d)", uint8(op))
}

// ParseOp accepts "sum", "prod", "min", "max" and "avg" (any case,
// surrounding space ignored).
func ParseOp(s string) (Op, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	for op, name := range opNames {
		if t == name {
			return Op(op), nil
		}
	}
	return 0, fmt.Errorf("reduce: unknown op %q (want sum, prod, min, max or avg)", s)
}

// ErrUnsupported is wrapped by the errors of Supported (and so of Reduce
// and Divide) for an invalid op or dtype or a combination without meaning.
var ErrUnsupported = errors.New("unsupported reduction")

// Supported returns nil if Reduce implements op on dtype dt, and otherwise
// an error wrapping ErrUnsupported. Every valid op works on every valid
// dtype except Avg on bool.
func Supported(op Op, dt tensor.DType) error {
	switch {
	case !op.Valid():
		return fmt.Errorf("reduce: %w: invalid op %v", ErrUnsupported, op)
	case !dt.Valid():
		return fmt.Errorf("reduce: %w: invalid dtype %v", ErrUnsupported, dt)
	case op == Avg && dt == tensor.Bool:
		return fmt.Errorf("reduce: %w: avg of bool (use sum for logical or, prod for logical and)", ErrUnsupported)
	}
	return nil
}
