package chat

// loopInfo is the `loop` variable inside a for block (jinja2's
// LoopContext, without recursion).
type loopInfo struct {
	items      []Value
	index0     int
	changedSet bool
	lastArgs   []Value
}

func (l *loopInfo) attr(name string) (Value, bool) {
	n := len(l.items)
	switch name {
	case "index0":
		return int64(l.index0), true
	case "index":
		return int64(l.index0 + 1), true
	case "revindex0":
		return int64(n - l.index0 - 1), true
	case "revindex":
		return int64(n - l.index0), true
	case "first":
		return l.index0 == 0, true
	case "last":
		return l.index0 == n-1, true
	case "length":
		return int64(n), true
	case "depth":
		return int64(1), true
	case "depth0":
		return int64(0), true
	case "previtem":
		if l.index0 == 0 {
			return undefined{msg: "there is no previous item"}, true
		}
		return l.items[l.index0-1], true
	case "nextitem":
		if l.index0 >= n-1 {
			return undefined{msg: "there is no next item"}, true
		}
		return l.items[l.index0+1], true
	case "cycle":
		return method("cycle", func(_ *renderer, args []Value, kwargs []kwArg) (Value, error) {
			if len(kwargs) > 0 {
				return nil, errf("cycle() takes no keyword arguments")
			}
			if len(args) == 0 {
				return nil, errf("no items for cycling given")
			}
			return args[l.index0%len(args)], nil
		}), true
	case "changed":
		return method("changed", func(_ *renderer, args []Value, kwargs []kwArg) (Value, error) {
			if len(kwargs) > 0 {
				return nil, errf("changed() takes no keyword arguments")
			}
			if l.changedSet && seqEq(l.lastArgs, args) {
				return false, nil
			}
			l.changedSet = true
			l.lastArgs = args
			return true, nil
		}), true
	}
	return nil, false
}
