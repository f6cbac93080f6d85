package ipc

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/chorus-rt/chorus/ccl"
)

// AutoTable is auto's choice of strategy by rank count, message size and
// whether the call is being captured into a CUDA graph (eager calls pay
// the host's per-call work, replays do not, so the best strategy can
// differ). It is measured: bench/autotable.py derives it from the JSON
// lines of scripts/gpu-bench.sh (eager and GRAPH=1), picking at each size
// the strategy with the lowest median time.
type AutoTable struct {
	// Source says where and when the table was measured.
	Source string     `json:"source"`
	Rows   []AutoRule `json:"rules"`
}

// AutoRule: for Ranks ranks, eager or graph-replayed (Graph), messages of
// up to MaxBytes bytes (0: any size) run Strategy. For one (Ranks, Graph)
// the rules are sorted by MaxBytes and the last has MaxBytes 0.
type AutoRule struct {
	Ranks    int    `json:"ranks"`
	Graph    bool   `json:"graph"`
	MaxBytes int64  `json:"max_bytes"`
	Strategy string `json:"strategy"`
}

//go:embed autotable.json
var defaultAutoTable []byte

// ParseAutoTable reads and checks a table: strategies oneshot or twoshot,
// rank counts 1..MaxRanks, each (ranks, graph) ending with an open rule,
// sizes increasing.
func ParseAutoTable(data []byte) (*AutoTable, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var t AutoTable
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("%w: auto table: %v", ccl.ErrBadArgs, err)
	}
	type key struct {
		ranks int
		graph bool
	}
	last := map[key]AutoRule{}
	for i, r := range t.Rows {
		if r.Ranks < 1 || r.Ranks > MaxRanks {
			return nil, fmt.Errorf("%w: auto table rule %d: ranks %d outside 1..%d", ccl.ErrBadArgs, i, r.Ranks, MaxRanks)
		}
		if s, err := ParseStrategy(r.Strategy); err != nil || (s != OneShot && s != TwoShot) {
			return nil, fmt.Errorf("%w: auto table rule %d: strategy %q (want oneshot or twoshot)", ccl.ErrBadArgs, i, r.Strategy)
		}
		k := key{r.Ranks, r.Graph}
		if p, ok := last[k]; ok && (p.MaxBytes == 0 || (r.MaxBytes != 0 && r.MaxBytes <= p.MaxBytes)) {
			return nil, fmt.Errorf("%w: auto table rule %d: sizes of ranks %d graph %v must increase and end with max_bytes 0", ccl.ErrBadArgs, i, r.Ranks, r.Graph)
		}
		if r.MaxBytes < 0 {
			return nil, fmt.Errorf("%w: auto table rule %d: max_bytes %d", ccl.ErrBadArgs, i, r.MaxBytes)
		}
		last[k] = r
	}
	for k, r := range last {
		if r.MaxBytes != 0 {
			return nil, fmt.Errorf("%w: auto table: ranks %d graph %v has no rule for messages above %d bytes (end with max_bytes 0)", ccl.ErrBadArgs, k.ranks, k.graph, r.MaxBytes)
		}
	}
	return &t, nil
}

// Pick is the table's strategy for bytes per rank on n ranks; ok is false
// when the table has no rule for n ranks in that mode.
func (t *AutoTable) Pick(bytes int64, n int, graph bool) (s Strategy, ok bool) {
	for _, r := range t.Rows {
		if r.Ranks == n && r.Graph == graph && (r.MaxBytes == 0 || bytes <= r.MaxBytes) {
			s, _ = ParseStrategy(r.Strategy)
			return s, true
		}
	}
	return 0, false
}

// fill appends def's rules for every (ranks, graph) t has none for.
func (t *AutoTable) fill(def *AutoTable) {
	has := func(r AutoRule) bool {
		return slices.ContainsFunc(t.Rows, func(x AutoRule) bool { return x.Ranks == r.Ranks && x.Graph == r.Graph })
	}
	var add []AutoRule
	for _, r := range def.Rows {
		if !has(r) {
			add = append(add, r)
		}
	}
	t.Rows = append(t.Rows, add...)
}

// Ranks lists the rank counts the table was measured for.
func (t *AutoTable) Ranks() []int {
	var out []int
	for _, r := range t.Rows {
		if !slices.Contains(out, r.Ranks) {
			out = append(out, r.Ranks)
		}
	}
	slices.Sort(out)
	return out
}

type autoLoad struct {
	t   *AutoTable
	err error
}

var (
	autoMu     sync.Mutex
	autoTables = map[string]autoLoad{}
)

// LoadAutoTable returns the table auto uses: the table file named file
// (Options.AutoTable; CHORUS_IPC_AUTO_TABLE in the controller's
// environment), with the built-in rules (autotable.json) for the rank
// counts and modes it lacks; or, for "", the built-in table. A file that
// cannot be read or parsed is an error (the all-reducer is not made).
// Each file is read once per process.
func LoadAutoTable(file string) (*AutoTable, error) {
	autoMu.Lock()
	defer autoMu.Unlock()
	if l, ok := autoTables[file]; ok {
		return l.t, l.err
	}
	t, err := loadAutoTable(file)
	autoTables[file] = autoLoad{t, err}
	return t, err
}

func loadAutoTable(file string) (*AutoTable, error) {
	data, name := defaultAutoTable, "built-in autotable.json"
	if file != "" {
		var err error
		if data, err = os.ReadFile(file); err != nil {
			return nil, fmt.Errorf("%w: auto table: %v", ccl.ErrBadArgs, err)
		}
		name = file
	}
	t, err := ParseAutoTable(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	// A measured file may cover only the rank counts it was measured
	// on: the built-in rules fill in the others (docs/ipc.md).
	def, err := ParseAutoTable(defaultAutoTable)
	if err != nil {
		return nil, err
	}
	t.fill(def)
	return t, nil
}
