package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/tensor"
)

// image builds a safetensors image from a header and data.
func image(js string, data []byte) []byte {
	var b bytes.Buffer
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(js)))
	b.Write(n[:])
	b.WriteString(js)
	b.Write(data)
	return b.Bytes()
}

func parse(img []byte) (*Header, error) {
	return ReadHeader("x.safetensors", bytes.NewReader(img), int64(len(img)))
}

func TestReadHeaderErrors(t *testing.T) {
	d24 := make([]byte, 24)
	good := `{"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}`
	bigLen := make([]byte, 8)
	binary.LittleEndian.PutUint64(bigLen, MaxHeaderSize+1)
	hugeLen := make([]byte, 16)
	binary.LittleEndian.PutUint64(hugeLen, 1<<63)
	shortLen := make([]byte, 8+10)
	binary.LittleEndian.PutUint64(shortLen, 100)
	cases := []struct {
		name   string
		img    []byte
		want   []error
		substr string
	}{
		{"empty file", nil, []error{ErrTruncated, ErrCorrupt}, "fewer than the 8"},
		{"short length", []byte{1, 2, 3}, []error{ErrTruncated}, "header length"},
		{"length over limit", bigLen, []error{ErrCorrupt}, "more than the"},
		{"length 2^63", hugeLen, []error{ErrCorrupt}, "header length"},
		{"header past end", shortLen, []error{ErrTruncated}, "100 bytes announced"},
		{"not json", image(`hello`, nil), []error{ErrCorrupt}, "not a JSON object"},
		{"json array", image(`[1,2]`, nil), []error{ErrCorrupt}, "not a JSON object"},
		{"invalid utf8", image("{\"a\xff\":{}}", nil), []error{ErrCorrupt}, "UTF-8"},
		{"unterminated", image(`{"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]}`, make([]byte, 4)), []error{ErrCorrupt}, "unterminated"},
		{"trailing garbage", image(good+`x`, d24), []error{ErrCorrupt}, "after the JSON"},
		{"two objects", image(good+`{}`, d24), []error{ErrCorrupt}, "after the JSON"},
		{"duplicate name", image(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, make([]byte, 8)), []error{ErrCorrupt}, `"a": name appears twice`},
		{"duplicate metadata", image(`{"__metadata__":{},"__metadata__":{}}`, nil), []error{ErrCorrupt}, "twice"},
		{"duplicate metadata key", image(`{"__metadata__":{"k":"1","k":"2"}}`, nil), []error{ErrCorrupt}, `"k" appears twice`},
		{"metadata not strings", image(`{"__metadata__":{"k":1}}`, nil), []error{ErrCorrupt}, "not a string"},
		{"empty name", image(`{"":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}`, make([]byte, 4)), []error{ErrCorrupt}, "empty tensor name"},
		{"unknown field", image(`{"a":{"dtype":"F32","shape":[],"data_offsets":[0,4],"x":1}}`, make([]byte, 4)), []error{ErrCorrupt}, "unknown field"},
		{"missing dtype", image(`{"a":{"shape":[],"data_offsets":[0,4]}}`, make([]byte, 4)), []error{ErrCorrupt}, "dtype: missing"},
		{"missing shape", image(`{"a":{"dtype":"F32","data_offsets":[0,4]}}`, make([]byte, 4)), []error{ErrCorrupt}, "shape: missing"},
		{"missing offsets", image(`{"a":{"dtype":"F32","shape":[]}}`, make([]byte, 4)), []error{ErrCorrupt}, "data_offsets: missing"},
		{"unknown dtype", image(`{"a":{"dtype":"F33","shape":[],"data_offsets":[0,4]}}`, make([]byte, 4)), []error{ErrDType}, `unknown safetensors dtype "F33"`},
		{"unsupported dtype", image(`{"a":{"dtype":"U16","shape":[2],"data_offsets":[0,4]}}`, make([]byte, 4)), []error{ErrDType}, "U16 has no chorus tensor type"},
		{"fp8 dtype", image(`{"a":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}}`, make([]byte, 4)), []error{ErrDType}, "F8_E4M3"},
		{"negative dim", image(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, make([]byte, 4)), []error{ErrCorrupt}, "negative"},
		{"shape not array", image(`{"a":{"dtype":"F32","shape":null,"data_offsets":[0,4]}}`, make([]byte, 4)), []error{ErrCorrupt}, "not an array"},
		{"one offset", image(`{"a":{"dtype":"F32","shape":[],"data_offsets":[4]}}`, make([]byte, 4)), []error{ErrCorrupt}, "1 numbers"},
		{"fractional dim", image(`{"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}`, make([]byte, 4)), []error{ErrCorrupt}, "shape: want an array"},
		{"overflowing shape", image(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`, make([]byte, 4)), []error{ErrCorrupt}, "overflows"},
		{"overflowing bytes", image(`{"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,4]}}`, make([]byte, 4)), []error{ErrCorrupt, ErrShape}, "needs"},
		{"too many dims", image(`{"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}}`, make([]byte, 4)), []error{ErrCorrupt}, "at most 16 dims"},
		{"three offsets", image(`{"a":{"dtype":"F32","shape":[],"data_offsets":[0,4,8]}}`, make([]byte, 4)), []error{ErrCorrupt}, "more than 2 numbers"},
		{"reversed offsets", image(`{"a":{"dtype":"F32","shape":[],"data_offsets":[4,0]}}`, make([]byte, 4)), []error{ErrCorrupt}, "not a byte range"},
		{"negative offset", image(`{"a":{"dtype":"F32","shape":[],"data_offsets":[-4,0]}}`, make([]byte, 4)), []error{ErrCorrupt}, "not a byte range"},
		{"wrong size", image(`{"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}}`, make([]byte, 20)), []error{ErrCorrupt, ErrShape}, "holds 20 bytes"},
		{"truncated data", image(good, make([]byte, 23)), []error{ErrTruncated, ErrCorrupt}, "past the 23-byte data section"},
		{"trailing data", image(good, make([]byte, 25)), []error{ErrCorrupt}, "no tensor owns"},
		{"overlap", image(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, make([]byte, 12)), []error{ErrCorrupt}, `overlaps tensor "a"`},
		{"same range twice", image(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)), []error{ErrCorrupt}, "overlaps"},
		{"gap", image(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`, make([]byte, 12)), []error{ErrCorrupt}, "gap of 4 bytes"},
		{"leading gap", image(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, make([]byte, 8)), []error{ErrCorrupt}, "starts with 4 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := parse(c.img)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !errors.Is(err, w) {
					t.Errorf("error %q is not %v", err, w)
				}
			}
			if !strings.Contains(err.Error(), c.substr) || !strings.Contains(err.Error(), "x.safetensors") {
				t.Errorf("error %q does not name the file or say %q", err, c.substr)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Errorf("error %T is not *Error", err)
			}
		})
	}
}

func TestReadHeaderValid(t *testing.T) {
	// Out of order in the JSON, a zero-sized tensor, a scalar, padding,
	// metadata: all valid.
	js := `{"b":{"dtype":"I8","shape":[3],"data_offsets":[6,9]},"__metadata__":{"format":"pt"},` +
		`"z":{"dtype":"BF16","shape":[0,4],"data_offsets":[6,6]},"a":{"dtype":"F16","shape":[],"data_offsets":[0,2]},` +
		`"c":{"dtype":"BOOL","shape":[4],"data_offsets":[2,6]}}    `
	h, err := parse(image(js, make([]byte, 9)))
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, ti := range h.Tensors {
		order = append(order, ti.Name)
	}
	if got := strings.Join(order, ","); got != "a,c,z,b" {
		t.Errorf("data order %s", got)
	}
	if h.Metadata["format"] != "pt" || h.DataStart != 8+int64(len(js)) {
		t.Errorf("metadata %v, data start %d", h.Metadata, h.DataStart)
	}
	b, ok := h.Lookup("b")
	if !ok || b.DType != tensor.Int8 || !b.Shape.Equal(tensor.Shape{3}) || b.Begin != 6 || b.Size() != 3 {
		t.Errorf("b = %+v", b)
	}
	if a, _ := h.Lookup("a"); a.Shape == nil || len(a.Shape) != 0 || a.DType != tensor.Float16 {
		t.Errorf("scalar a = %+v", a)
	}
	if _, err := parse(image(`{}`, nil)); err != nil {
		t.Errorf("empty header: %v", err)
	}
}

func TestDTypes(t *testing.T) {
	for _, dt := range tensor.DTypes {
		name, err := DTypeName(dt)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseDType(name)
		if err != nil || back != dt {
			t.Errorf("%v -> %s -> %v, %v", dt, name, back, err)
		}
	}
	if _, err := DTypeName(tensor.Invalid); !errors.Is(err, ErrDType) {
		t.Errorf("invalid dtype: %v", err)
	}
}

func randomTensors(t *testing.T) []Named {
	var out []Named
	shapes := []tensor.Shape{{3, 5}, {7}, {}, {2, 0, 3}, {4, 3, 2}, {1}, {5, 2}, {3}, {2, 2}, {6}}
	for i, dt := range tensor.DTypes {
		x := tensor.MustNew(dt, shapes[i])
		if err := tensor.Random(x, uint64(i+1)); err != nil {
			t.Fatal(err)
		}
		out = append(out, Named{Name: "t." + dt.String(), Tensor: x})
	}
	return out
}

func TestWriteRoundTrip(t *testing.T) {
	dir := t.TempDir()
	ts := randomTensors(t)
	path := filepath.Join(dir, "model.safetensors")
	meta := map[string]string{"format": "pt", "note": "ünïcode"}
	if err := WriteFile(path, ts, meta); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.DataStart%8 != 0 {
		t.Errorf("data section at %d, not 8-aligned", f.DataStart)
	}
	if f.Metadata["note"] != meta["note"] || len(f.Metadata) != 2 {
		t.Errorf("metadata %v", f.Metadata)
	}
	if len(f.Names()) != len(ts) {
		t.Fatalf("names %v", f.Names())
	}
	for _, nt := range ts {
		got, err := f.Tensor(nt.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := tensor.Equal(got, nt.Tensor); err != nil {
			t.Errorf("%s: %v", nt.Name, err)
		}
	}
	if _, err := f.Tensor("nope"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("missing tensor: %v", err)
	}
	// Nothing else is left in the directory (the temporary file is gone).
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("directory holds %d entries", len(ents))
	}
}

func TestWriteErrors(t *testing.T) {
	x := tensor.MustNew(tensor.Float32, tensor.Shape{2})
	cases := map[string][]Named{
		"duplicate": {{"a", x}, {"a", x}},
		"empty":     {{"", x}},
		"reserved":  {{MetadataKey, x}},
		"nil":       {{"a", nil}},
	}
	for name, ts := range cases {
		path := filepath.Join(t.TempDir(), "m.safetensors")
		if err := WriteFile(path, ts, nil); err == nil {
			t.Errorf("%s: no error", name)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("%s: a file was left behind", name)
		}
	}
}

// TestTruncatedAfterOpen: a file cut short after Open fails the read with
// ErrTruncated naming the tensor; truncated files fail Open.
func TestTruncatedFile(t *testing.T) {
	dir := t.TempDir()
	ts := randomTensors(t)
	path := filepath.Join(dir, "m.safetensors")
	if err := WriteFile(path, ts, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	last := f.Tensors[len(f.Tensors)-1]
	if err := os.Truncate(path, f.Size()-1); err != nil {
		t.Fatal(err)
	}
	_, err = f.Tensor(last.Name)
	if !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), last.Name) {
		t.Errorf("read after truncation: %v", err)
	}
	if _, err := Open(path); !errors.Is(err, ErrTruncated) {
		t.Errorf("open truncated: %v", err)
	}
	if _, err := Open(filepath.Join(dir, "absent.safetensors")); !errors.Is(err, ErrNotFound) {
		t.Errorf("open absent: %v", err)
	}
	if err := f.ReadRange(last, make([]byte, 2), last.Size()-1); err == nil {
		t.Error("read past the tensor: no error")
	}
}

func writeBytes(path string, b []byte) error { return os.WriteFile(path, b, 0o644) }

func TestCheckpointSharded(t *testing.T) {
	dir := t.TempDir()
	ts := randomTensors(t)
	files, err := WriteSharded(dir, ts, 40, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("only %d files", len(files))
	}
	for _, p := range []string{dir, filepath.Join(dir, IndexName)} {
		c, err := OpenCheckpoint(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Names()) != len(ts) || len(c.Files()) != len(files) {
			t.Errorf("%s: %d names, %d files", p, len(c.Names()), len(c.Files()))
		}
		var total int64
		for _, nt := range ts {
			f, info, err := c.Lookup(nt.Name)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, info.Size())
			if err := f.ReadRange(info, got, 0); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, nt.Tensor.Bytes()) {
				t.Errorf("%s differs", nt.Name)
			}
			total += nt.Tensor.NumBytes()
		}
		if c.TotalBytes() != total {
			t.Errorf("total %d, want %d", c.TotalBytes(), total)
		}
		if _, _, err := c.Lookup("nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("lookup: %v", err)
		}
		c.Close()
	}
	// Without the index, the directory of shards still opens.
	os.Remove(filepath.Join(dir, IndexName))
	c, err := OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Names()) != len(ts) {
		t.Errorf("no index: %d names", len(c.Names()))
	}
	c.Close()
}

func TestCheckpointErrors(t *testing.T) {
	x := tensor.MustNew(tensor.Float32, tensor.Shape{2})
	y := tensor.MustNew(tensor.Int8, tensor.Shape{3})
	setup := func(t *testing.T) string {
		dir := t.TempDir()
		if err := WriteFile(filepath.Join(dir, "a.safetensors"), []Named{{"x", x}}, nil); err != nil {
			t.Fatal(err)
		}
		if err := WriteFile(filepath.Join(dir, "b.safetensors"), []Named{{"y", y}}, nil); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	cases := []struct {
		name   string
		index  string // written as the index when not empty
		extra  func(dir string)
		want   error
		substr string
	}{
		{"missing tensor", `{"weight_map":{"x":"a.safetensors","y":"b.safetensors","z":"b.safetensors"}}`, nil, ErrNotFound, `"z": listed in`},
		{"wrong file", `{"weight_map":{"x":"b.safetensors","y":"b.safetensors"}}`, nil, ErrNotFound, `"x"`},
		{"missing file", `{"weight_map":{"x":"a.safetensors","y":"c.safetensors"}}`, nil, ErrNotFound, "c.safetensors"},
		{"path escape", `{"weight_map":{"x":"../a.safetensors"}}`, nil, ErrCorrupt, "plain file name"},
		{"unknown field", `{"weight_map":{},"extra":1}`, nil, ErrCorrupt, `unknown field "extra"`},
		{"no weight map", `{"metadata":{}}`, nil, ErrCorrupt, "weight_map: missing"},
		{"duplicate key", `{"weight_map":{"x":"a.safetensors","x":"b.safetensors"}}`, nil, ErrCorrupt, "twice"},
		{"duplicate across files", "", func(dir string) {
			WriteFile(filepath.Join(dir, "c.safetensors"), []Named{{"x", x}}, nil)
		}, ErrCorrupt, "also in"},
		{"corrupt shard", "", func(dir string) {
			os.WriteFile(filepath.Join(dir, "c.safetensors"), []byte{1, 2}, 0o644)
		}, ErrTruncated, "c.safetensors"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := setup(t)
			if c.index != "" {
				os.WriteFile(filepath.Join(dir, IndexName), []byte(c.index), 0o644)
			}
			if c.extra != nil {
				c.extra(dir)
			}
			ck, err := OpenCheckpoint(dir)
			if err == nil {
				ck.Close()
			}
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.substr) {
				t.Errorf("got %v, want %v mentioning %q", err, c.want, c.substr)
			}
		})
	}
	// A tensor in a listed file but not in the index.
	dir := t.TempDir()
	WriteFile(filepath.Join(dir, "a.safetensors"), []Named{{"x", x}, {"y", y}}, nil)
	os.WriteFile(filepath.Join(dir, IndexName), []byte(`{"weight_map":{"x":"a.safetensors"}}`), 0o644)
	if _, err := OpenCheckpoint(dir); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "not listed") {
		t.Errorf("unlisted tensor in a listed file: %v", err)
	}
	if _, err := OpenCheckpoint(t.TempDir()); !errors.Is(err, ErrNotFound) {
		t.Errorf("empty directory: %v", err)
	}
}
