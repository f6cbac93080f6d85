package tokenizer

// behavior is tokenizers' SplitDelimiterBehavior: what a split does with the
// matched delimiters.
type behavior uint8

const (
	removed behavior = iota
	isolated
	mergedWithPrevious
	mergedWithNext
	contiguous
)

var behaviorNames = map[string]behavior{
	"Removed":            removed,
	"Isolated":           isolated,
	"MergedWithPrevious": mergedWithPrevious,
	"MergedWithNext":     mergedWithNext,
	"Contiguous":         contiguous,
}

// apply turns the spans of findSpans into the pieces to keep: in the result
// match means "remove". It mirrors NormalizedString::split.
func (b behavior) apply(spans []span) []span {
	switch b {
	case isolated:
		for i := range spans {
			spans[i].match = false
		}
		return spans
	case removed:
		return spans
	case contiguous:
		acc := spans[:0]
		prev := false
		for _, s := range spans {
			m := s.match
			if m == prev && len(acc) > 0 {
				acc[len(acc)-1].end = s.end
			} else {
				acc = append(acc, span{s.start, s.end, false})
			}
			prev = m
		}
		return acc
	case mergedWithPrevious:
		acc := spans[:0]
		prev := false
		for _, s := range spans {
			m := s.match
			if m && !prev && len(acc) > 0 {
				acc[len(acc)-1].end = s.end
			} else {
				acc = append(acc, span{s.start, s.end, false})
			}
			prev = m
		}
		return acc
	case mergedWithNext:
		// Walk backwards, writing from the end of the slice down.
		w := len(spans)
		prev := false
		for i := len(spans) - 1; i >= 0; i-- {
			s := spans[i]
			if s.match && !prev && w < len(spans) {
				spans[w].start = s.start
			} else {
				w--
				spans[w] = span{s.start, s.end, false}
			}
			prev = s.match
		}
		return spans[w:]
	}
	return spans
}
