package plan

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the .show golden files")

func goldenFiles(t testing.TB) []string {
	files, err := filepath.Glob("testdata/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden plans: %v", err)
	}
	return files
}

func load(t testing.TB, name string) *Plan {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(data)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return p
}

// The golden plans are in MSCCL++'s exact output format (json.dumps with
// indent=2): Marshal must reproduce them byte for byte.
func TestGoldenRoundTrip(t *testing.T) {
	for _, f := range goldenFiles(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Read(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			var out bytes.Buffer
			if err := p.Write(&out); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), data) {
				t.Errorf("Marshal differs from the golden file:\n%s", firstDiff(data, out.Bytes()))
			}
			q, err := Parse(out.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(p, q) {
				t.Errorf("round trip changed the plan")
			}
		})
	}
}

func firstDiff(a, b []byte) string {
	al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return "line " + strconv.Itoa(i+1) + ":\n  want " + x + "\n  got  " + y
		}
	}
	return "(same lines)"
}

func TestShowGolden(t *testing.T) {
	for _, f := range goldenFiles(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			p := load(t, filepath.Base(f))
			var out bytes.Buffer
			if err := p.Show(&out); err != nil {
				t.Fatal(err)
			}
			golden := strings.TrimSuffix(f, ".json") + ".show"
			if *update {
				if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(out.Bytes(), want) {
				t.Errorf("Show differs from %s:\n%s", golden, firstDiff(want, out.Bytes()))
			}
		})
	}
}

func TestShowLine(t *testing.T) {
	p := load(t, "allreduce_allpairs_2.json")
	var out bytes.Buffer
	if err := p.Show(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"rank 0 tb 0  #3  put  in[1:2] -> rank1 scr[0:1]  via mem\n",
		"rank 1 tb 0  #8  res  in[1:2], scr[0:1] -> in[1:2], rank0 in[1:2]  via mem  (sum)\n",
		"rank 0 tb 0  #5  signal  rank1  via mem ch0\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("Show lacks %q:\n%s", want, out.String())
		}
	}
}

func TestEnumNames(t *testing.T) {
	if got := len(OpNames()); got != 31 {
		t.Errorf("%d op names, want 31", got)
	}
	for _, o := range OpNames() {
		back, err := ParseOpName(o.String())
		if err != nil || back != o {
			t.Errorf("op %v: parse back %v, %v", o, back, err)
		}
	}
	for _, s := range []string{"", "tpkt", "PUT", "start"} {
		if _, err := ParseOpName(s); err == nil {
			t.Errorf("ParseOpName(%q) accepted", s)
		}
	}
	for _, c := range []struct {
		s    string
		want ChannelType
	}{{"none", ChannelNone}, {"memory", ChannelMemory}, {"port", ChannelPort}, {"switch", ChannelSwitch}} {
		if got, err := ParseChannelType(c.s); err != nil || got != c.want || got.String() != c.s {
			t.Errorf("channel %q: %v %v", c.s, got, err)
		}
	}
	if _, err := ParseChannelType("nvls"); err == nil {
		t.Error("channel type nvls accepted")
	}
	for _, s := range []string{"i", "o", "s"} {
		if b, err := ParseBufferType(s); err != nil || b.String() != s {
			t.Errorf("buffer %q: %v %v", s, b, err)
		}
	}
	for _, s := range []string{"sum", "min", "max"} {
		if r, err := ParseReduceOp(s); err != nil || r.String() != s {
			t.Errorf("reduce %q: %v %v", s, r, err)
		}
	}
	if ReduceNone.Effective() != ReduceSum {
		t.Error("absent reduce_op is not sum")
	}
	if OpName(200).String() != "OpName(200)" || OpInvalid.String() != "OpName(0)" {
		t.Errorf("bad names: %v %v", OpName(200), OpInvalid)
	}
	if !AllReduce.Known() || Collective("foo").Known() {
		t.Error("Collective.Known")
	}
}

func TestDefaults(t *testing.T) {
	p, err := Parse([]byte(`{"name":"x","collective":"allgather","protocol":"Simple","inplace":false,
		"gpus":[{"id":0,"input_chunks":1,"output_chunks":1,"scratch_chunks":0,"threadblocks":[],"channels":[],"remote_buffers":[]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.NumThreadsPerBlock != 1024 || p.BufferAlignment != 16 || p.MinMessageSize != 0 || p.MaxMessageSize != DefaultMaxMessageSize || p.ReuseResources || p.UseDoubleScratchBuffer {
		t.Errorf("defaults: %+v", p)
	}
	if err := p.Validate(); err != nil {
		t.Error(err)
	}
}

// The "tbg" key some DSL versions write is read as tbg_info.
func TestTBGAlias(t *testing.T) {
	p := load(t, "every_op_kind.json")
	data, _ := p.Marshal()
	alias := bytes.Replace(data, []byte(`"tbg_info"`), []byte(`"tbg"`), -1)
	q, err := Parse(alias)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, q) {
		t.Error("tbg alias decoded differently")
	}
	both := bytes.Replace(data, []byte(`"tbg_info": {`), []byte(`"tbg": {"tb_id": 0, "tbg_size": 2}, "tbg_info": {`), 1)
	if _, err := Parse(both); err == nil || !strings.Contains(err.Error(), `both "tbg_info" and "tbg"`) {
		t.Errorf("both keys: %v", err)
	}
}

func TestMarshalRejectsBadEnums(t *testing.T) {
	cases := []struct {
		name string
		mut  func(p *Plan)
		want string
	}{
		{"protocol", func(p *Plan) { p.Protocol = ProtocolInvalid }, "invalid protocol"},
		{"op name", func(p *Plan) { p.GPUs[0].ThreadBlocks[0].Ops[1].Name = OpInvalid }, "gpu 0 tb 0 op 1: invalid op name"},
		{"buffer", func(p *Plan) { p.GPUs[1].ThreadBlocks[0].Ops[3].Src[0].Type = BufferNone }, "gpu 1 tb 0 op 3 (put): invalid buffer type"},
		{"channel", func(p *Plan) { p.GPUs[0].Channels[0].Type = ChannelNone }, "gpu 0 channel 0: channel type none is not a GPU channel"},
		{"ref kind", func(p *Plan) { p.GPUs[0].ThreadBlocks[0].Ops[3].Dst[0].Kind = 9 }, "invalid buffer reference kind"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := load(t, "allreduce_allpairs_2.json")
			c.mut(p)
			_, err := p.Marshal()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want %q", err, c.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	base, err := os.ReadFile("testdata/allreduce_allpairs_2.json")
	if err != nil {
		t.Fatal(err)
	}
	// op 3 of gpu 0 tb 0 is the put; gpu channel 0 is the memory channel.
	put := `"name": "put",`
	cases := []struct {
		name     string
		old, new string
		n        int
		want     string
	}{
		{"unknown op", put, `"name": "teleport",`, 1, `gpu 0 tb 0 op 3: unknown op name "teleport"`},
		{"unknown op channel type", `"channel_type": "memory"
            },
            {
              "name": "nop"`, `"channel_type": "nvlink"
            },
            {
              "name": "nop"`, 1, `gpu 0 tb 0 op 1 (rlxwait): unknown channel type "nvlink"`},
		{"unknown field", put, put + ` "colour": 1,`, 1, `gpu 0 tb 0 op 3: unknown field "colour" (this version of chorus does not know it`},
		{"unknown top field", `"inplace": true,`, `"inplace": true, "extra": 0,`, 1, `unknown field "extra"`},
		{"unknown buffer", `"type": "i",`, `"type": "x",`, 1, `gpu 0 tb 0 op 3 (put) src_buff[0]: unknown buffer type "x"`},
		{"ref with two kinds", `"buffer_id": 0,`, `"buffer_id": 0, "type": "s",`, 1, `gpu 0 tb 0 op 3 (put) dst_buff[0]: needs exactly one of`},
		{"barrier field on put", put, put + ` "barrier_id": 1,`, 1, `gpu 0 tb 0 op 3 (put): barrier fields on a put op`},
		{"missing protocol", `"protocol": "Simple",`, ``, 1, `plan: missing field "protocol"`},
		{"bad protocol", `"protocol": "Simple",`, `"protocol": "LL128",`, 1, `unknown protocol "LL128"`},
		{"missing id", `"id": 1,
      "input_chunks"`, `"input_chunks"`, 1, `gpu 1: missing field "id"`},
		{"reduce op", `"reduce_op": "sum"`, `"reduce_op": "prod"`, 1, `gpu 0 tb 0 op 8 (res): unknown reduce op "prod"`},
		{"not json", `{`, `[`, 1, `bad format`},
		{"float index", `"index": 1,`, `"index": 1.5,`, 1, `bad format`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := strings.Replace(string(base), c.old, c.new, c.n)
			if data == string(base) {
				t.Fatalf("mutation %q did not apply", c.old)
			}
			_, err := Parse([]byte(data))
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrFormat) {
				t.Errorf("%v does not wrap ErrFormat", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v\nwant %q", err, c.want)
			}
		})
	}
	for _, s := range []string{
		`{"name":"x","collective":"c","protocol":"LL","inplace":true,"gpus":[{"id":0,"input_chunks":1,"output_chunks":1,"scratch_chunks":0,"threadblocks":[],"channels":[{"channel_type":"pcie","connected_to":[]}],"remote_buffers":[]}]}`,
		`{"name":"x","collective":"c","protocol":"LL","inplace":true,"gpus":[{"id":0,"input_chunks":1,"output_chunks":1,"scratch_chunks":0,"threadblocks":[{"id":0,"ops":[],"channels":[{"channel_type":"fast","channel_ids":[]}],"remote_buffer_refs":[]}],"channels":[],"remote_buffers":[]}]}`,
		`{"name":"x","collective":"c","protocol":"LL","inplace":true,"gpus":[]} {}`,
		`{"name":"x","collective":"c","protocol":"LL","inplace":true,"gpus":[{"id":0,"input_chunks":1,"output_chunks":1,"scratch_chunks":0,"threadblocks":[{"id":0,"ops":[{"name":"pipeline","iter_context":{"unit_size":1,"num_chunks":1},"ops":[{"name":"pipeline","iter_context":{"unit_size":1,"num_chunks":1},"ops":[]}]}],"channels":[],"remote_buffer_refs":[]}],"channels":[],"remote_buffers":[]}]}`,
	} {
		if _, err := Parse([]byte(s)); err == nil || !errors.Is(err, ErrFormat) {
			t.Errorf("accepted or wrong error %v: %s", err, s)
		}
	}
}
