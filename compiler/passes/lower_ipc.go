package passes

import (
	"fmt"

	"github.com/chorus-rt/chorus/compiler/ir"
)

const lowerIPCName = "lower-gpu-ipc-alloc-storage"

// IPCAllocStorageFunc is the registered function that allocates IPC
// memory on a worker: call_packed(IPCAllocStorageFunc, nbytes, alignment)
// returns a storage of exactly nbytes bytes in scope "ipc_memory" on the
// worker's device, whose handle every peer worker has opened. Every worker
// must make the same calls in the same order (the exchange of handles is
// collective).
const IPCAllocStorageFunc = "chorus.ipc.alloc_storage"

// LowerGPUIPCAllocStorage replaces IPC allocations with calls of the
// runtime's IPC allocator (IPCAllocStorageFunc):
//
//	%s = alloc_storage(N, A, dev, "ipc_memory")  =>  %s = call_packed("chorus.ipc.alloc_storage", N, A)
//	%t = alloc_tensor(shape, dt, dev, "ipc_memory")
//	    =>  %t.storage = call_packed("chorus.ipc.alloc_storage", bytes, 64)
//	        %t = alloc_tensor(%t.storage, 0, shape, dt)
//
// bytes is exactly elements * dtype size. (TVM passes the byte count as a
// shape together with the dtype, so its allocator multiplies by the dtype
// width again and over-allocates; chorus passes bytes and no dtype.) The
// results keep their types, so later views and uses are unchanged.
func LowerGPUIPCAllocStorage() Pass {
	return Pass{Name: lowerIPCName, Run: func(m *ir.Module) (*ir.Module, error) {
		return forEachFunc(m, lowerIPC)
	}}
}

func lowerIPC(f *ir.Function) error {
	nm := newNamer(f)
	for _, blk := range f.Blocks {
		var out []*ir.Binding
		for _, b := range blk.Bindings {
			if len(b.Args) != 4 || b.Args[3] != ir.Str(ir.ScopeIPC) {
				out = append(out, b)
				continue
			}
			switch b.Op {
			case ir.OpAllocStorage:
				b.Op = ir.OpCallPacked
				b.Args = []ir.Arg{ir.Str(IPCAllocStorageFunc), b.Args[0], b.Args[1]}
				out = append(out, b)
			case ir.OpAllocTensor:
				tt, ok := b.Type.(ir.TensorType)
				if !ok {
					return fmt.Errorf("%w: %%%s is not a tensor", ErrInvalidIR, b.Result)
				}
				n, err := tt.Bytes()
				if err != nil {
					return fmt.Errorf("%%%s: %w", b.Result, err)
				}
				st := nm.fresh(b.Result + ".storage")
				out = append(out, &ir.Binding{
					Result: st,
					Type:   ir.StorageType{Device: tt.Device},
					Op:     ir.OpCallPacked,
					Args:   []ir.Arg{ir.Str(IPCAllocStorageFunc), ir.Int(n), ir.Int(StorageAlignment)},
				})
				shape, dt := b.Args[0], b.Args[1]
				b.Op = ir.OpAllocTensorView
				b.Args = []ir.Arg{ir.Ref(st), ir.Int(0), shape, dt}
				out = append(out, b)
			default:
				out = append(out, b)
			}
		}
		blk.Bindings = out
	}
	return nil
}
