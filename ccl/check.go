package ccl

import (
	"fmt"

	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/tensor"
)

// Desc is what a rank says about its call, compared across ranks.
type Desc struct {
	Kind  Kind
	DType tensor.DType
	Op    reduce.Op
	Root  int32
	// Count is the element count every rank must agree on: the send count
	// (allreduce, allgather, reduce-scatter input, gather), the count each
	// rank receives (broadcast, scatter).
	Count int64
}

func (d Desc) String() string {
	s := fmt.Sprintf("%s(%s x %d", d.Kind, d.DType, d.Count)
	if d.Kind == KindAllReduce || d.Kind == KindReduceScatter {
		s += ", " + d.Op.String()
	}
	if d.Kind == KindBroadcast || d.Kind == KindScatter || d.Kind == KindGather {
		s += fmt.Sprintf(", root %d", d.Root)
	}
	return s + ")"
}

// Compare returns an error wrapping ErrMismatch naming the first rank whose
// descriptor differs from rank 0's; all ranks reach the same verdict.
func Compare(descs []Desc) error {
	for r := 1; r < len(descs); r++ {
		if descs[r] != descs[0] {
			return fmt.Errorf("%w: rank 0 called %v, rank %d called %v", ErrMismatch, descs[0], r, descs[r])
		}
	}
	return nil
}

func hostBytes(name string, t *tensor.Tensor) ([]byte, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: %s tensor is nil", ErrBadArgs, name)
	}
	b, err := t.HostBytes()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadArgs, name, err)
	}
	return b, nil
}

// overlap reports whether two tensors share any byte of storage.
func overlap(a, b *tensor.Tensor) bool {
	if a.Storage() != b.Storage() {
		return false
	}
	return a.Offset() < b.Offset()+b.NumBytes() && b.Offset() < a.Offset()+a.NumBytes()
}

func same(a, b *tensor.Tensor) bool {
	return a.Storage() == b.Storage() && a.Offset() == b.Offset() && a.NumBytes() == b.NumBytes()
}

// Args is the checked, host-side view of one rank's call.
type Args struct {
	Desc
	Send, Recv []byte
}

// CheckAllReduce validates an allreduce or a reduce-scatter on one rank of
// size n. In-place (send and recv the same view) is allowed; partial
// overlap is not.
func CheckAllReduce(kind Kind, send, recv *tensor.Tensor, op reduce.Op, n int) (Args, error) {
	var a Args
	sb, err := hostBytes("send", send)
	if err != nil {
		return a, err
	}
	rb, err := hostBytes("recv", recv)
	if err != nil {
		return a, err
	}
	if send.DType() != recv.DType() {
		return a, fmt.Errorf("%w: send is %s, recv is %s", ErrBadArgs, send.DType(), recv.DType())
	}
	if err := reduce.Supported(op, send.DType()); err != nil {
		return a, fmt.Errorf("%w: %v", ErrBadArgs, err)
	}
	want := send.NumElements()
	if kind == KindReduceScatter {
		if want%int64(n) != 0 {
			return a, fmt.Errorf("%w: reduce_scatter of %d elements over %d ranks: not divisible", ErrBadArgs, want, n)
		}
		want /= int64(n)
		if overlap(send, recv) {
			return a, fmt.Errorf("%w: reduce_scatter send and recv overlap", ErrBadArgs)
		}
	} else if overlap(send, recv) && !same(send, recv) {
		return a, fmt.Errorf("%w: send and recv partially overlap", ErrBadArgs)
	}
	if recv.NumElements() != want {
		return a, fmt.Errorf("%w: recv has %d elements, want %d", ErrBadArgs, recv.NumElements(), want)
	}
	return Args{Desc: Desc{Kind: kind, DType: send.DType(), Op: op, Count: send.NumElements()}, Send: sb, Recv: rb}, nil
}

// CheckAllGather validates an allgather: recv holds n sends.
func CheckAllGather(send, recv *tensor.Tensor, n int) (Args, error) {
	var a Args
	sb, err := hostBytes("send", send)
	if err != nil {
		return a, err
	}
	rb, err := hostBytes("recv", recv)
	if err != nil {
		return a, err
	}
	if send.DType() != recv.DType() {
		return a, fmt.Errorf("%w: send is %s, recv is %s", ErrBadArgs, send.DType(), recv.DType())
	}
	if recv.NumElements() != send.NumElements()*int64(n) {
		return a, fmt.Errorf("%w: recv has %d elements, want %d x %d", ErrBadArgs, recv.NumElements(), n, send.NumElements())
	}
	if overlap(send, recv) {
		return a, fmt.Errorf("%w: allgather send and recv overlap", ErrBadArgs)
	}
	return Args{Desc: Desc{Kind: KindAllGather, DType: send.DType(), Count: send.NumElements()}, Send: sb, Recv: rb}, nil
}

// CheckRooted validates broadcast, scatter and gather on rank `rank`.
// Only the root's send (broadcast, scatter) or recv (gather) is used; the
// other side may be nil on non-roots.
func CheckRooted(kind Kind, send, recv *tensor.Tensor, root, rank, n int) (Args, error) {
	var a Args
	if root < 0 || root >= n {
		return a, fmt.Errorf("%w: root %d out of range [0, %d)", ErrBadArgs, root, n)
	}
	isRoot := rank == root
	var sb, rb []byte
	var err error
	needSend := kind == KindGather || isRoot
	needRecv := kind != KindGather || isRoot
	if needSend {
		if sb, err = hostBytes("send", send); err != nil {
			return a, err
		}
	}
	if needRecv {
		if rb, err = hostBytes("recv", recv); err != nil {
			return a, err
		}
	}
	if needSend && needRecv && send.DType() != recv.DType() {
		return a, fmt.Errorf("%w: send is %s, recv is %s", ErrBadArgs, send.DType(), recv.DType())
	}
	d := Desc{Kind: kind, Root: int32(root)}
	switch kind {
	case KindBroadcast:
		d.DType, d.Count = recv.DType(), recv.NumElements()
		if isRoot && send.NumElements() != recv.NumElements() {
			return a, fmt.Errorf("%w: broadcast send has %d elements, recv %d", ErrBadArgs, send.NumElements(), recv.NumElements())
		}
		if isRoot && overlap(send, recv) && !same(send, recv) {
			return a, fmt.Errorf("%w: send and recv partially overlap", ErrBadArgs)
		}
	case KindScatter:
		d.DType, d.Count = recv.DType(), recv.NumElements()
		if isRoot {
			if send.NumElements()%int64(n) != 0 {
				return a, fmt.Errorf("%w: scatter of %d elements over %d ranks: not divisible", ErrBadArgs, send.NumElements(), n)
			}
			if send.NumElements()/int64(n) != recv.NumElements() {
				return a, fmt.Errorf("%w: scatter send has %d elements, recv %d, want recv = send / %d", ErrBadArgs, send.NumElements(), recv.NumElements(), n)
			}
			if overlap(send, recv) {
				return a, fmt.Errorf("%w: scatter send and recv overlap", ErrBadArgs)
			}
		}
	case KindGather:
		d.DType, d.Count = send.DType(), send.NumElements()
		if isRoot {
			if recv.NumElements() != send.NumElements()*int64(n) {
				return a, fmt.Errorf("%w: gather recv has %d elements, want %d x %d", ErrBadArgs, recv.NumElements(), n, send.NumElements())
			}
			if overlap(send, recv) {
				return a, fmt.Errorf("%w: gather send and recv overlap", ErrBadArgs)
			}
		}
	default:
		return a, fmt.Errorf("%w: %v is not a rooted collective", ErrBadArgs, kind)
	}
	return Args{Desc: d, Send: sb, Recv: rb}, nil
}

// CheckPeer validates a point-to-point peer.
func CheckPeer(peer, rank, n int) error {
	if peer < 0 || peer >= n {
		return fmt.Errorf("%w: peer %d out of range [0, %d)", ErrBadArgs, peer, n)
	}
	if peer == rank {
		return fmt.Errorf("%w: rank %d cannot send to or receive from itself", ErrBadArgs, rank)
	}
	return nil
}
