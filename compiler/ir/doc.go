// Package ir is chorus's compiler IR: modules of functions, functions of
// typed parameters and blocks of bindings in SSA style
// (`%x = op(args) : type`), and values typed by shape, dtype and virtual
// device (package vdevice). It has a text format (Print, Parse), a Go
// builder (FuncBuilder) and a well-formedness check (Verify). The passes
// in package passes rewrite it; a VM walks it (Function.Bindings).
//
// # Destination passing
//
// The IR sits at the level a VM executes: every allocation is explicit.
// Ops that compute tensor data (matmul, add, gelu, the collectives,
// custom_allreduce, device_copy) define no value; they write their last
// operand, which an earlier alloc_tensor (or the caller) provided:
//
//	%h = alloc_tensor([8, 128], float16, {cuda:0}, "global") : tensor<...>
//	matmul(%x, %w1, %h)
//
// So the memory planner sees every buffer and its lifetime, and the IPC
// rewrite can find the allocation behind an all-reduce input. Values are
// still single-assignment names, but the tensor a name refers to is
// mutated by the ops that write it. Only allocations, views (alias,
// reshape, alloc_tensor of a storage) and packed calls define values.
// A VM frees every allocation of a call when the call returns, except the
// returned values; there is no explicit kill/free op, because the memory
// planner derives lifetimes from uses.
//
// # Text format
//
//	module    = "module" "@" NAME { function } .
//	function  = "func" "@" NAME "(" [ param { "," param } ] ")" "{"
//	            { "block" "{" { binding } "}" } "return" [ value { "," value } ] "}" .
//	param     = value ":" type .
//	binding   = [ value "=" ] ( OPNAME "(" [ arg { "," arg } ] ")" | value ) [ ":" type ] .
//	arg       = value | INT | STRING | IDENT | shape | vdevice .
//	value     = "%" NAME .
//	shape     = "[" [ INT { "," INT } ] "]" .
//	type      = "tensor" "<" shape "," DTYPE [ "," vdevice ] ">"
//	          | "storage" [ "<" vdevice ">" ] | "object" .
//	vdevice   = "{" [ devtype [ ":" INT ] ] [ "target=" target ] [ "scope=" STRING ] "}" .
//	devtype   = "cpu" | "cuda" | "?" .      ("?" must be followed by ":" INT)
//	target    = IDENT [ "(" IDENT "=" STRING { "," IDENT "=" STRING } ")" ] .
//
// NAME is letters, digits, '_' and '.'; IDENT the same starting with a
// letter or '_'; INT an optional '-' and decimal digits; STRING a Go
// double-quoted string. An IDENT argument that is a canonical dtype name
// (float16, int32, ...) is a dtype, true and false are booleans, anything
// else is a symbol (sum, one_shot). `//` starts a comment. A binding
// defines a value exactly when it has a `: type`. `%b = %a : T` is an
// alias. Parse errors give line:column.
//
// # Ops
//
//	%s = alloc_storage(bytes, alignment, device, scope)    : storage<..>
//	%t = alloc_tensor(shape, dtype, device, scope)         : tensor<..>
//	%t = alloc_tensor(%s, offset, shape, dtype)            : tensor<..>  (view)
//	[%r =] call_packed("registered.name", args...)         [: type]
//	allreduce(%x, sum|prod|min|max|avg, %out)
//	allgather(%x, %out)                 out = all ranks' x, rank order
//	reduce_scatter(%x, op, %out)        out = this rank's slice
//	broadcast(%x, %out)                 out = worker 0's x
//	custom_allreduce(%x, auto|one_shot|two_shot|"PLAN", %out)   x in ipc_memory
//	%v = reshape(%x, shape)                                : tensor<..>  (view)
//	device_copy(%x, src_vdevice, dst_vdevice, %out)
//	matmul(%a, %b, %out)                a [..., m, k], b [k, n], out [..., m, n]
//	add(%a, %b, %out)                   numpy broadcasting
//	gelu(%x, %out)                      tanh approximation (as in GPT-2 and
//	                                    Megatron-LM, which tensor-parallel MLPs follow)
//
// An allocation's type carries its device argument with the scope
// argument as memory scope; the device argument itself carries no scope.
// The collectives run over all workers of the session; the world size is
// not known to the compiler, so allgather and reduce_scatter only check
// that one size is a multiple of the other.
package ir
