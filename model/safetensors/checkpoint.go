package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"
)

// maxIndexSize bounds the index file (real ones are tens of KB).
const maxIndexSize = 64 << 20

// Checkpoint is a model's weights in one or several safetensors files.
type Checkpoint struct {
	// Path is what OpenCheckpoint was given.
	Path   string
	files  []*File
	byName map[string]*File
	names  []string
}

// OpenCheckpoint opens a checkpoint: a .safetensors file; an index file
// (*.safetensors.index.json: {"weight_map": {tensor: file}, "metadata":
// {...}}); or a directory holding model.safetensors.index.json, else
// model.safetensors, else any number of *.safetensors files. Every file
// is validated. With an index, each tensor it lists must be in the file it
// names, and each tensor of those files must be listed (to that file);
// without one, a tensor name may appear in only one file.
func OpenCheckpoint(path string) (*Checkpoint, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, &Error{File: path, Msg: "open checkpoint", Err: err, Kinds: notFoundIf(err)}
	}
	c := &Checkpoint{Path: path, byName: map[string]*File{}}
	switch {
	case !st.IsDir() && strings.HasSuffix(path, ".json"):
		err = c.openIndex(path)
	case !st.IsDir():
		err = c.openFiles([]string{path})
	default:
		err = c.openDir(path)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	for n := range c.byName {
		c.names = append(c.names, n)
	}
	sort.Strings(c.names)
	return c, nil
}

func (c *Checkpoint) openDir(dir string) error {
	idx := filepath.Join(dir, IndexName)
	if _, err := os.Stat(idx); err == nil {
		return c.openIndex(idx)
	}
	single := filepath.Join(dir, "model.safetensors")
	if _, err := os.Stat(single); err == nil {
		return c.openFiles([]string{single})
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		return &Error{File: dir, Msg: "list", Err: err}
	}
	if len(paths) == 0 {
		return &Error{File: dir, Msg: "no " + IndexName + " and no *.safetensors files", Kinds: []error{ErrNotFound}}
	}
	sort.Strings(paths)
	return c.openFiles(paths)
}

func (c *Checkpoint) openFiles(paths []string) error {
	for _, p := range paths {
		f, err := Open(p)
		if err != nil {
			return err
		}
		c.files = append(c.files, f)
		for _, t := range f.Tensors {
			if other, dup := c.byName[t.Name]; dup {
				return &Error{File: p, Tensor: t.Name, Msg: "also in " + other.Path, Kinds: []error{ErrCorrupt}}
			}
			c.byName[t.Name] = f
		}
	}
	return nil
}

func (c *Checkpoint) openIndex(path string) error {
	wm, err := readIndex(path)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	byFile := map[string]*File{}
	var fileNames []string
	for _, fn := range wm {
		if _, ok := byFile[fn]; !ok {
			byFile[fn] = nil
			fileNames = append(fileNames, fn)
		}
	}
	sort.Strings(fileNames)
	for _, fn := range fileNames {
		f, err := Open(filepath.Join(dir, fn))
		if err != nil {
			return err
		}
		c.files = append(c.files, f)
		byFile[fn] = f
		for _, t := range f.Tensors {
			if wm[t.Name] != fn {
				msg := "not listed in " + path
				if wm[t.Name] != "" {
					msg = "listed in " + path + " as in " + wm[t.Name]
				}
				return &Error{File: f.Path, Tensor: t.Name, Msg: msg, Kinds: []error{ErrCorrupt}}
			}
		}
	}
	names := make([]string, 0, len(wm))
	for n := range wm {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		f := byFile[wm[n]]
		if _, ok := f.Lookup(n); !ok {
			return &Error{File: f.Path, Tensor: n, Msg: "listed in " + path + " but not in the file", Kinds: []error{ErrNotFound}}
		}
		c.byName[n] = f
	}
	return nil
}

// readIndex reads an index's weight_map strictly: a JSON object with
// "weight_map" (required; file names are plain names in the index's
// directory) and "metadata" (optional, any JSON object, not checked);
// nothing else, no duplicate keys.
func readIndex(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &Error{File: path, Msg: "open", Err: err, Kinds: notFoundIf(err)}
	}
	defer f.Close()
	js, err := io.ReadAll(io.LimitReader(f, maxIndexSize+1))
	if err != nil {
		return nil, &Error{File: path, Msg: "read", Err: err}
	}
	if len(js) > maxIndexSize {
		return nil, corrupt(path, "", "", fmt.Sprintf("index larger than %d bytes", maxIndexSize))
	}
	if !utf8.Valid(js) {
		return nil, corrupt(path, "", "", "not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, corrupt(path, "", "", "not a JSON object")
	}
	var wm map[string]string
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, corrupt(path, "", "", "bad JSON: "+err.Error())
		}
		k, _ := tok.(string)
		if seen[k] {
			return nil, corrupt(path, "", k, "appears twice")
		}
		seen[k] = true
		switch k {
		case "weight_map":
			if wm, err = decodeStringMap(dec); err != nil {
				return nil, corrupt(path, "", k, err.Error())
			}
		case "metadata":
			var m map[string]any
			if err := dec.Decode(&m); err != nil || m == nil {
				return nil, corrupt(path, "", k, "not a JSON object")
			}
		default:
			return nil, corrupt(path, "", "", fmt.Sprintf("unknown field %q", k))
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, corrupt(path, "", "", "bad JSON: unterminated object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, corrupt(path, "", "", "data after the JSON object")
	}
	if wm == nil {
		return nil, corrupt(path, "", "weight_map", "missing")
	}
	for n, fn := range wm {
		if fn == "" || fn != filepath.Base(fn) || fn == "." || fn == ".." || strings.ContainsRune(fn, '\\') {
			return nil, corrupt(path, n, "weight_map", fmt.Sprintf("file %q is not a plain file name in the index's directory", fn))
		}
	}
	return wm, nil
}

// Names lists every tensor, sorted.
func (c *Checkpoint) Names() []string { return append([]string(nil), c.names...) }

// Files lists the open files.
func (c *Checkpoint) Files() []*File { return append([]*File(nil), c.files...) }

// Lookup finds the file holding a tensor; the error wraps ErrNotFound.
func (c *Checkpoint) Lookup(name string) (*File, Info, error) {
	f, ok := c.byName[name]
	if !ok {
		return nil, Info{}, &Error{File: c.Path, Tensor: name, Msg: "no such tensor in the checkpoint", Kinds: []error{ErrNotFound}}
	}
	info, _ := f.Lookup(name)
	return f, info, nil
}

// TotalBytes is the size of every tensor's data.
func (c *Checkpoint) TotalBytes() int64 {
	var n int64
	for _, f := range c.files {
		for _, t := range f.Tensors {
			n += t.Size()
		}
	}
	return n
}

// Close closes every file.
func (c *Checkpoint) Close() error {
	var errs []error
	for _, f := range c.files {
		errs = append(errs, f.Close())
	}
	c.files = nil
	return errors.Join(errs...)
}
