// Package vdevice describes, at compile time, where a value of a chorus
// program lives: a VirtualDevice is a device type, a virtual device id, a
// Target (how code for it is compiled) and a memory scope. Each of the four
// may be left unconstrained, so that device planning can fill it in.
//
// The zero VirtualDevice is fully unconstrained. A VirtualDevice with a
// target always has the target's device type: the constructors infer it
// when the device type is unconstrained and reject a disagreeing pair with
// ErrTargetMismatch. Because the fields are unexported, every value obeys
// that invariant, and the algebra below relies on it.
//
// # Join and Default
//
// Join(a, b) is the most constrained VirtualDevice that agrees with both:
// field by field it takes a's value when a constrains the field and b's
// otherwise, and fails (ok == false) when both constrain a field
// differently. Targets are compared structurally (same kind, same
// attributes), not by identity.
//
// Note on the reference example: one published example claims that
//
//	(cpu, ?, llvm, ?) join (?, 3, ?, "local")
//
// has no join. That contradicts the definition above, since the two agree
// on every field that both constrain. chorus follows the definition: the
// join is (cpu, 3, llvm, "local"). TestJoinPublishedExample pins this.
//
// Default(a, b) takes a's field when a constrains it and b's otherwise,
// except that b's target is only taken when b's device type equals the
// resulting device type. It never fails.
//
// Laws (checked by property tests): Join is commutative and idempotent;
// Default never fails and keeps the target invariant; and
// Join(a, Default(a, b)) == Default(a, b) for every a and b. The last holds
// because every field Default takes from b is a field a leaves open, and
// every field a constrains comes back unchanged; it would break only if a
// Default result could carry a target disagreeing with its device type,
// which the device-type check on b's target prevents. The mirror law
// Join(b, Default(a, b)) == Default(a, b) does not hold: a wins every
// clash, so b may disagree with the result.
package vdevice
