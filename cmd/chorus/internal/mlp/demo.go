package mlp

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/chorus-rt/chorus/compiler/passes"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

// Demo runs the MLP once on s (workers on dev) and prints what it did:
// the model and its sharding, the pipeline, peak memory before and after
// planning, the compiled IR, the result check and the time of a few
// steps. It fails when the result is outside tolerance.
func Demo(ctx context.Context, out io.Writer, s *session.Session, c Config, dev tensor.Device, strategy string) error {
	n := s.NumWorkers()
	where := "cpu"
	if dev.Kind == tensor.CUDA {
		where = "their GPUs"
	}
	fmt.Fprintf(out, "   tensor-parallel MLP on the VM: %s session, %d workers on %s\n", s.Kind(), n, where)
	f := c.FFN / int64(max(n, 1))
	fmt.Fprintf(out, "   y = gelu(x·W1 + b1)·W2 + b2, %s; x [%d, %d] on every worker\n", c.DType, c.Batch, c.Hidden)
	fmt.Fprintf(out, "   W1 [%d, %d] split by columns, W2 [%d, %d] by rows: %d of %d per worker; all-reduce of the [%d, %d] partial sums\n",
		c.Hidden, c.FFN, c.FFN, c.Hidden, f, c.FFN, c.Batch, c.Hidden)
	st, ck, err := Run(ctx, s, c, dev, strategy)
	if err != nil {
		return err
	}
	defer st.Release()
	cc := st.Compiled
	var names []string
	for _, p := range cc.Pipeline.Passes {
		names = append(names, p.Name)
	}
	fmt.Fprintf(out, "   pipeline %q: %s\n", cc.Pipeline.Name, strings.Join(names, ", "))
	fmt.Fprintf(out, "   peak bytes per worker and call: %d before memory planning, %d after (%s)\n",
		cc.PeakBefore.Total, cc.PeakAfter.Total, byScope(cc.PeakAfter))
	fmt.Fprintln(out, "   compiled @mlp (each worker's part):")
	for _, line := range strings.Split(strings.TrimRight(cc.Module.String(), "\n"), "\n") {
		if line == "" {
			fmt.Fprintln(out)
			continue
		}
		fmt.Fprintf(out, "     %s\n", line)
	}
	status := "ok"
	if ck.Err != nil {
		status = "FAILED: " + ck.Err.Error()
	}
	fmt.Fprintf(out, "   result: y [%d, %d] on every worker; max |y - reference| = %.3g (max |reference| %.3g; tolerance %g + %g·|ref|): %s\n",
		c.Batch, c.Hidden, ck.MaxAbsErr, ck.MaxRef, ck.ATol, ck.RTol, status)
	fmt.Fprintf(out, "   identical bits on every worker: %v\n", ck.Identical)
	tm, err := st.Time(ctx, 2, 10)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "   one step (call + sync of every worker): median %v over %d steps\n", tm.Median, tm.Iters)
	return ck.Err
}

func byScope(u passes.MemoryUsage) string {
	var parts []string
	for s, b := range u.ByScope {
		parts = append(parts, fmt.Sprintf("%s %d", s, b))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
