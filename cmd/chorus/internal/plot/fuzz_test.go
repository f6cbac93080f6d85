package plot

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzRead: any input reads to records or a *LineError, never a panic;
// records read are drawable (positive sizes and times) and draw to SVG.
func FuzzRead(f *testing.F) {
	for _, s := range []string{chorusRow, planRow, gpuPlanRow, torchRow, glooRow, mpiRow, sessionRow, membwRow, planopsRow, unknownBand,
		"", "\n\n#x\n", "{}", "null", "[]", `{"bytes":1e300,"time_us":1}`, `{"bench":"allreduce","bytes":8,"time_us":1e-300,"workers":3}`,
		`{"bench":"allreduce","bytes":4000000000000000000,"time_us":1e-300,"workers":2}`, `{"bench":"x","bytes":1,"time_us":1e300,"busbw_gbs":1.7e308}`,
		chorusRow + "\n" + `{"bench":"allreduce","bytes":8}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := Read(bytes.NewReader(b), "fuzz", false)
		if err != nil {
			var le *LineError
			if !errors.As(err, &le) || le.Line < 1 {
				t.Fatalf("error %v is not a *LineError with a line", err)
			}
			return
		}
		for _, r := range in.Records {
			if r.Bytes < 1 || !(r.TimeUs > 0) || r.BusBW < 0 {
				t.Fatalf("record %+v", r)
			}
		}
		if len(in.Records) > 0 && len(in.Records) < 50 {
			var out bytes.Buffer
			if err := Bench(&out, in.Records, BenchOptions{Title: "fuzz"}); err != nil {
				t.Fatalf("Bench: %v", err)
			}
		}
	})
}
