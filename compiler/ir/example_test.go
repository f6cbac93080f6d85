package ir_test

import (
	"fmt"

	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/compiler/vdevice"
	"github.com/chorus-rt/chorus/tensor"
)

// buildMLP builds one worker's part of a tensor-parallel MLP (Megatron
// style): the first linear layer is split by columns, so each worker holds
// w1[:, shard] and b1[shard] and computes its slice of the hidden layer
// without communication; the second is split by rows, so each worker's
// product is a partial sum of the output, completed by an all-reduce
// before the (replicated) bias b2 is added.
func buildMLP(batch, hidden, ffnShard int64, dt tensor.DType, dev vdevice.VirtualDevice) (*ir.Function, error) {
	b := ir.NewFunc("mlp")
	any := vdevice.Unconstrained
	x := b.Param("x", ir.Tensor(tensor.Shape{batch, hidden}, dt, dev))
	w1 := b.Param("w1", ir.Tensor(tensor.Shape{hidden, ffnShard}, dt, any))
	b1 := b.Param("b1", ir.Tensor(tensor.Shape{ffnShard}, dt, any))
	w2 := b.Param("w2", ir.Tensor(tensor.Shape{ffnShard, hidden}, dt, any))
	b2 := b.Param("b2", ir.Tensor(tensor.Shape{hidden}, dt, any))

	h := b.AllocTensor("h", tensor.Shape{batch, ffnShard}, dt, any, "")
	b.Matmul(x, w1, h)
	hb := b.AllocTensor("hb", tensor.Shape{batch, ffnShard}, dt, any, "")
	b.Add(h, b1, hb)
	a := b.AllocTensor("a", tensor.Shape{batch, ffnShard}, dt, any, "")
	b.Gelu(hb, a)
	p := b.AllocTensor("partial", tensor.Shape{batch, hidden}, dt, any, "")
	b.Matmul(a, w2, p)
	r := b.AllocTensor("reduced", tensor.Shape{batch, hidden}, dt, any, "")
	b.Allreduce(p, "sum", r)
	y := b.AllocTensor("y", tensor.Shape{batch, hidden}, dt, any, "")
	b.Add(r, b2, y)
	b.Return(y)
	return b.Finish()
}

func ExampleFuncBuilder() {
	dev, err := vdevice.New(vdevice.CUDA, 0, nil, "")
	if err != nil {
		panic(err)
	}
	f, err := buildMLP(8, 64, 128, tensor.Float16, dev)
	if err != nil {
		fmt.Println(err)
		return
	}
	m := &ir.Module{Name: "tp", Funcs: []*ir.Function{f}}
	if err := ir.Verify(m); err != nil {
		fmt.Println(err)
		return
	}
	for i, b := range f.Bindings() {
		if i < 3 {
			fmt.Println(b)
		}
	}
	// Output:
	// %h = alloc_tensor([8, 128], float16, {}, "global") : tensor<[8, 128], float16, {scope="global"}>
	// matmul(%x, %w1, %h)
	// %hb = alloc_tensor([8, 128], float16, {}, "global") : tensor<[8, 128], float16, {scope="global"}>
}
