package tokenizer

// A postProcessor adds the special tokens of a template around the ids of
// one sequence.
type postProcessor interface {
	process(ids []int32, addSpecial bool) []int32
}

type seqProcessor []postProcessor

func (q seqProcessor) process(ids []int32, addSpecial bool) []int32 {
	for _, p := range q {
		ids = p.process(ids, addSpecial)
	}
	return ids
}

// byteLevelProcessor only trims offsets in tokenizers: ids pass through.
type byteLevelProcessor struct{}

func (byteLevelProcessor) process(ids []int32, _ bool) []int32 { return ids }

// templatePiece is one item of a TemplateProcessing template: the sequence
// itself (special == nil) or the ids of a special token.
type templatePiece struct {
	special []int32
	isSeq   bool
}

// templateProcessor is TemplateProcessing with its single-sequence template.
type templateProcessor struct {
	single []templatePiece
}

func (t *templateProcessor) process(ids []int32, addSpecial bool) []int32 {
	out := make([]int32, 0, len(ids)+4)
	for _, p := range t.single {
		switch {
		case p.isSeq:
			out = append(out, ids...)
		case addSpecial:
			out = append(out, p.special...)
		}
	}
	return out
}
