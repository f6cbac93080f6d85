package safetensors

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzHeader feeds arbitrary images to the reader: it must never panic,
// never allocate more than the image's size plus the bounded header, and
// whatever it accepts must satisfy the layout rules.
func FuzzHeader(f *testing.F) {
	seeds := []string{
		`{}`,
		`{"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}`,
		`{"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}}  `,
		`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}}`,
		`{"a":{"dtype":"U16","shape":[1],"data_offsets":[0,2]}}`,
		`{"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]}}`,
		`{"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"a":{}}`,
		`[`,
	}
	for _, s := range seeds {
		f.Add(image(s, make([]byte, 24)))
	}
	var huge [8]byte
	binary.LittleEndian.PutUint64(huge[:], 1<<62)
	f.Add(huge[:])
	f.Fuzz(func(t *testing.T, img []byte) {
		h, err := ReadHeader("fuzz", bytes.NewReader(img), int64(len(img)))
		if err != nil {
			return
		}
		pos := int64(0)
		for _, ti := range h.Tensors {
			if ti.Begin != pos || ti.End < ti.Begin {
				t.Fatalf("accepted a layout with %q at [%d, %d), expected start %d", ti.Name, ti.Begin, ti.End, pos)
			}
			n, err := ti.Shape.NumElements()
			if err != nil || n*int64(ti.DType.Size()) != ti.Size() {
				t.Fatalf("accepted %q with shape %v and %d bytes", ti.Name, ti.Shape, ti.Size())
			}
			pos = ti.End
		}
		if h.DataStart+pos != int64(len(img)) {
			t.Fatalf("accepted tensors ending at %d in a %d-byte image", h.DataStart+pos, len(img))
		}
	})
}

// FuzzIndex: the index reader must not panic either.
func FuzzIndex(f *testing.F) {
	f.Add([]byte(`{"metadata":{"total_size":8},"weight_map":{"a":"m-1.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{"a":"../x"}}`))
	f.Add([]byte(`{"weight_map":{"a":"x","a":"y"}}`))
	f.Fuzz(func(t *testing.T, js []byte) {
		path := t.TempDir() + "/model.safetensors.index.json"
		if err := writeBytes(path, js); err != nil {
			t.Fatal(err)
		}
		wm, err := readIndex(path)
		if err != nil {
			return
		}
		for _, fn := range wm {
			if fn == "" || bytes.ContainsAny([]byte(fn), `/\`) || fn == ".." {
				t.Fatalf("accepted file name %q", fn)
			}
		}
	})
}
