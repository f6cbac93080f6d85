package nccl_test

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"unsafe"

	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/gpu/nccl"
	"github.com/chorus-rt/chorus/internal/testutil/gputest"
	"github.com/chorus-rt/chorus/tensor"
)

const envRank = "CHORUS_NCCL_TEST_RANK"

func TestMain(m *testing.M) {
	if r := os.Getenv(envRank); r != "" {
		os.Exit(rankMain(r))
	}
	os.Exit(m.Run())
}

func libs(t *testing.T) (*nccl.Lib, *cuda.Driver) {
	l, err := nccl.Load()
	if err != nil {
		if !errors.Is(err, nccl.ErrNotLoaded) {
			t.Fatal(err)
		}
		gputest.Skipf(t, "no NCCL here: %v", err)
	}
	d, err := cuda.Load()
	if err != nil {
		gputest.Skipf(t, "no CUDA driver: %v", err)
	}
	if err := d.Init(); err != nil {
		gputest.Skipf(t, "cuInit: %v", err)
	}
	return l, d
}

func TestDTypeOf(t *testing.T) {
	for _, dt := range tensor.DTypes {
		_, err := nccl.DTypeOf(dt)
		if (err != nil) != (dt == tensor.Bool || dt == tensor.Int16) {
			t.Errorf("DTypeOf(%s): %v", dt, err)
		}
	}
}

// allreduceRank joins an nranks communicator on device dev as rank and
// all-reduces rank-dependent floats; it returns an error if the sum is
// wrong.
func allreduceRank(l *nccl.Lib, d *cuda.Driver, id nccl.UniqueID, nranks, rank, dev int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cd, err := d.DeviceGet(dev)
	if err != nil {
		return err
	}
	ctx, err := d.PrimaryCtxRetain(cd)
	if err != nil {
		return err
	}
	defer d.PrimaryCtxRelease(cd)
	if err := d.SetCurrent(ctx); err != nil {
		return err
	}
	c, err := l.CommInitRank(nranks, id, rank)
	if err != nil {
		return err
	}
	defer l.CommDestroy(c)
	if n, err := l.Count(c); err != nil || n != nranks {
		return fmt.Errorf("Count = %d, %v", n, err)
	}
	if r, err := l.UserRank(c); err != nil || r != rank {
		return fmt.Errorf("UserRank = %d, %v", r, err)
	}
	const n = 1 << 20
	host := make([]float32, n)
	for i := range host {
		host[i] = float32(rank+1) + float32(i%7)
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&host[0])), 4*n)
	p, err := d.MemAlloc(4 * n)
	if err != nil {
		return err
	}
	defer d.MemFree(p)
	if err := d.MemcpyHtoD(p, b); err != nil {
		return err
	}
	s, err := d.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		return err
	}
	defer d.StreamDestroy(s)
	if err := l.AllReduce(uint64(p), uint64(p), n, nccl.Float32, nccl.Sum, c, uintptr(s)); err != nil {
		return err
	}
	if err := d.StreamSynchronize(s); err != nil {
		return err
	}
	if err := l.AsyncError(c); err != nil {
		return err
	}
	if err := d.MemcpyDtoH(b, p); err != nil {
		return err
	}
	for i, v := range host {
		want := float32(nranks*(nranks+1)/2) + float32(nranks*(i%7))
		if v != want {
			return fmt.Errorf("rank %d: x[%d] = %v, want %v", rank, i, v, want)
		}
	}
	return nil
}

func TestOneRankAllReduce(t *testing.T) {
	l, d := libs(t)
	v, err := l.Version()
	if err != nil || v < 20000 {
		t.Fatalf("Version = %d, %v", v, err)
	}
	t.Logf("NCCL version %d", v)
	id, err := l.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	if err := allreduceRank(l, d, id, 1, 0, 0); err != nil {
		t.Fatal(err)
	}
}

// TestTwoProcessAllReduce runs one rank per GPU in two processes (the
// unique id travels in the environment); it needs two GPUs.
func TestTwoProcessAllReduce(t *testing.T) {
	l, _ := libs(t)
	gputest.Require(t, 2)
	id, err := l.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	var cmds []*exec.Cmd
	for r := range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envRank+"="+strconv.Itoa(r), "CHORUS_NCCL_TEST_ID="+hex.EncodeToString(id[:]))
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func rankMain(rs string) int {
	rank, _ := strconv.Atoi(rs)
	raw, err := hex.DecodeString(os.Getenv("CHORUS_NCCL_TEST_ID"))
	if err != nil || len(raw) != 128 {
		fmt.Println("bad id")
		return 1
	}
	var id nccl.UniqueID
	copy(id[:], raw)
	l, err := nccl.Load()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	d, err := cuda.Load()
	if err == nil {
		err = d.Init()
	}
	if err == nil {
		err = allreduceRank(l, d, id, 2, rank, rank)
	}
	if err != nil {
		fmt.Printf("rank %d: %v\n", rank, err)
		return 1
	}
	return 0
}
