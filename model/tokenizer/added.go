package tokenizer

import (
	"fmt"
	"sort"
	"unicode/utf8"
)

// AddedToken is an entry of tokenizer.json's added_tokens.
type AddedToken struct {
	ID         int
	Content    string
	Special    bool // skipped by Decode(..., skipSpecial=true)
	SingleWord bool // only matches between non-word characters
	LStrip     bool // takes the white space on its left
	RStrip     bool // takes the white space on its right
	Normalized bool // matched in the normalized text rather than the original
}

// addedVocab is tokenizers' AddedVocabulary: the added tokens, split out of
// the text before the model sees it.
type addedVocab struct {
	byContent map[string]int32
	byID      map[int32]AddedToken
	normed    map[int32]string // normalized content, where it differs
	special   map[string]bool
	raw       *tokenTrie // tokens matched in the original text
	norm      *tokenTrie // tokens matched in the normalized text
}

// newAddedVocab adds the tokens in order, as AddedVocabulary::add_tokens
// does: a token already known (added, or in the model's vocab) keeps that id,
// others get the next free id after the model's vocab; the ids written in
// the file are not used.
func newAddedVocab(tokens []AddedToken, model *bpeModel, n normalizer) (*addedVocab, error) {
	a := &addedVocab{
		byContent: make(map[string]int32),
		byID:      make(map[int32]AddedToken),
		normed:    make(map[int32]string),
		special:   make(map[string]bool),
	}
	next := int32(model.size())
	for _, t := range tokens {
		if t.Content == "" {
			continue
		}
		if id, ok := a.byContent[t.Content]; ok {
			if old := a.byID[id]; old == withID(t, old.ID) {
				continue
			}
		}
		id, ok := a.byContent[t.Content]
		if !ok {
			if id, ok = model.vocab[t.Content]; !ok {
				id = next
				next++
			}
		}
		if t.Normalized && n != nil {
			if s := n.normalize(t.Content); s != t.Content {
				a.normed[id] = s
			}
		}
		a.byContent[t.Content] = id
		if t.Special {
			a.special[t.Content] = true
		}
		t.ID = int(id)
		a.byID[id] = t
	}
	ids := make([]int32, 0, len(a.byID))
	for id := range a.byID {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var raw, norm []trieEntry
	for _, id := range ids {
		t := a.byID[id]
		if t.Normalized {
			pat := t.Content
			if s, ok := a.normed[id]; ok {
				pat = s
			}
			norm = append(norm, trieEntry{pat, id})
		} else {
			raw = append(raw, trieEntry{t.Content, id})
		}
	}
	var err error
	if a.raw, err = newTokenTrie(raw); err != nil {
		return nil, err
	}
	if a.norm, err = newTokenTrie(norm); err != nil {
		return nil, err
	}
	return a, nil
}

func withID(t AddedToken, id int) AddedToken {
	t.ID = id
	return t
}

// tokenString is the string Decode uses for an added token.
func (a *addedVocab) tokenString(id int32) (string, bool) {
	t, ok := a.byID[id]
	if !ok {
		return "", false
	}
	if s, ok := a.normed[id]; ok {
		return s, true
	}
	return t.Content, true
}

// split cuts p at the added tokens of trie, as AddedVocabulary::find_matches
// does: leftmost-longest matches, skipping single-word tokens inside words,
// widening lstrip/rstrip tokens over neighbouring white space.
func (a *addedVocab) split(dst []piece, p piece, t *tokenTrie) []piece {
	s := p.text
	if t == nil || s == "" {
		if s != "" {
			dst = append(dst, p)
		}
		return dst
	}
	emit := func(start, end int, id int32) {
		if end > start {
			dst = append(dst, piece{s[start:end], id, p.atStart && start == 0})
		}
	}
	offset := 0
	for i := 0; i < len(s); {
		id, end := t.longest(s, i)
		if id < 0 {
			i++
			continue
		}
		start, stop := i, end
		i = end
		tok := a.byID[id]
		if tok.SingleWord {
			startSpace := start == 0 || !endsWithWord(s[:start])
			stopSpace := stop == len(s) || !startsWithWord(s[stop:])
			if !startSpace || !stopSpace {
				continue
			}
		}
		if tok.LStrip {
			start = max(spaceStartAtEnd(s[:start]), offset)
		}
		if tok.RStrip {
			stop += spaceLenAtStart(s[stop:])
		}
		emit(offset, start, -1)
		emit(start, stop, id)
		offset = stop // the search goes on from the match's end, as in tokenizers
	}
	emit(offset, len(s), -1)
	return dst
}

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return s != "" && isWordChar(r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return s != "" && isWordChar(r)
}

// spaceStartAtEnd is where the white space at the end of s begins.
func spaceStartAtEnd(s string) int {
	i := len(s)
	for i > 0 {
		r, n := utf8.DecodeLastRuneInString(s[:i])
		if !isWS(r) {
			break
		}
		i -= n
	}
	return i
}

// spaceLenAtStart is the length of the white space at the start of s.
func spaceLenAtStart(s string) int {
	i := 0
	for i < len(s) {
		r, n := runeAt(s, i)
		if !isWS(r) {
			break
		}
		i += n
	}
	return i
}

type trieEntry struct {
	pat string
	id  int32
}

// tokenTrie finds the longest added token starting at a position.
type tokenTrie struct {
	first [256]bool
	edges map[uint64]int32 // node<<8 | byte -> child node
	ids   []int32          // token id ending at each node, -1 if none
}

func newTokenTrie(entries []trieEntry) (*tokenTrie, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	t := &tokenTrie{edges: make(map[uint64]int32), ids: []int32{-1}}
	for _, e := range entries {
		if e.pat == "" {
			return nil, fmt.Errorf("tokenizer: added token %d normalizes to the empty string", e.id)
		}
		node := int32(0)
		for i := 0; i < len(e.pat); i++ {
			key := uint64(node)<<8 | uint64(e.pat[i])
			child, ok := t.edges[key]
			if !ok {
				child = int32(len(t.ids))
				t.ids = append(t.ids, -1)
				t.edges[key] = child
			}
			node = child
		}
		if t.ids[node] >= 0 {
			return nil, fmt.Errorf("tokenizer: added tokens %d and %d have the same pattern %q", t.ids[node], e.id, e.pat)
		}
		t.ids[node] = e.id
		t.first[e.pat[0]] = true
	}
	return t, nil
}

// longest returns the id and end of the longest token at s[i:], or -1.
func (t *tokenTrie) longest(s string, i int) (int32, int) {
	if !t.first[s[i]] {
		return -1, 0
	}
	best, end := int32(-1), 0
	node := int32(0)
	for j := i; j < len(s); j++ {
		child, ok := t.edges[uint64(node)<<8|uint64(s[j])]
		if !ok {
			break
		}
		node = child
		if t.ids[node] >= 0 {
			best, end = t.ids[node], j+1
		}
	}
	return best, end
}
