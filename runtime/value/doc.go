// Package value defines the closed set of argument kinds that cross the
// controller/worker boundary (int, float, bool, string, bytes, dtype, device,
// shape, tensor, register reference and nil) and the conversions from
// ordinary Go values into them.
//
// A value is held in a plain Go interface (any) whose dynamic type is one of:
// nil, int64, float64, bool, string, []byte, tensor.DType, tensor.Device,
// tensor.Shape, *tensor.Tensor or Ref. Normalize maps the friendlier Go types
// callers write (int, float32, uint16, ...) onto that set and rejects the
// rest with an error that names the type.
package value
