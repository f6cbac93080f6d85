package tokenizer

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"
)

// mergeVal is the rank of a merge and the id of the token it makes.
type mergeVal struct{ rank, id int32 }

// bpeModel is the BPE model of tokenizers.
type bpeModel struct {
	vocab    map[string]int32
	idToTok  []string // dense id -> token; "" marks a hole (see hasTok)
	hasTok   []bool
	sparse   map[int32]string // used instead of idToTok when ids are sparse
	merges   *pairMap
	asciiID  [128]int32 // vocab id of each one-byte token, -1 if none
	fbID     [256]int32 // id of <0xNN>, -1 if none
	unk      string
	hasUnk   bool
	prefix   string
	suffix   string
	hasPre   bool
	hasSuf   bool
	fuseUnk  bool
	fallback bool
	ignore   bool

	// Byte-level deferral: pieces arrive as raw bytes.
	byteID   [256]int32       // id of the alphabet character of each byte, -1 if none
	rawVocab map[string]int32 // byte-level tokens keyed by the bytes they stand for

	// joinable holds (last rune of a, first rune of b) for every merge
	// (a, b): two neighbouring characters whose pair is not in it can never
	// end up in one token, so long pieces are merged in independent (and
	// cacheable) segments. nil when that does not hold (prefix or suffix).
	joinable map[uint64]struct{}

	cache *wordCache
	words sync.Pool
}

// segmentMin is the length from which pieces are cut into segments.
const segmentMin = 24

func runePair(a, b rune) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

type bpeConfig struct {
	vocab        map[string]int
	merges       [][2]string
	unk          *string
	prefix       *string
	suffix       *string
	fuseUnk      bool
	byteFallback bool
	ignoreMerges bool
}

func newBPE(c bpeConfig) (*bpeModel, error) {
	m := &bpeModel{
		vocab:    make(map[string]int32, len(c.vocab)),
		merges:   newPairMap(len(c.merges)),
		fuseUnk:  c.fuseUnk,
		fallback: c.byteFallback,
		ignore:   c.ignoreMerges,
		cache:    newWordCache(),
	}
	m.words.New = func() any { return new(word) }
	if c.unk != nil {
		m.unk, m.hasUnk = *c.unk, true
	}
	if c.prefix != nil {
		m.prefix, m.hasPre = *c.prefix, *c.prefix != ""
	}
	if c.suffix != nil {
		m.suffix, m.hasSuf = *c.suffix, *c.suffix != ""
	}
	maxID := int32(-1)
	for tok, id := range c.vocab {
		if id < 0 || id > 1<<31-2 {
			return nil, fmt.Errorf("tokenizer: model.vocab[%q]: id %d is out of range", tok, id)
		}
		m.vocab[tok] = int32(id)
		maxID = max(maxID, int32(id))
	}
	m.buildReverse(maxID)
	for i := range m.asciiID {
		m.asciiID[i] = m.lookup(string(rune(i)))
	}
	for b := range m.fbID {
		m.fbID[b] = m.lookup(fmt.Sprintf("<0x%02X>", b))
	}
	for b := range m.byteID {
		m.byteID[b] = m.lookup(byteToStr[b])
	}
	if !m.hasPre && !m.hasSuf && !m.sharedIDs() {
		m.joinable = make(map[uint64]struct{})
	}
	for rank, mg := range c.merges {
		a, b := mg[0], mg[1]
		aID, ok := m.vocab[a]
		if !ok {
			return nil, fmt.Errorf("tokenizer: model.merges[%d]: token %q is not in the vocab", rank, a)
		}
		bID, ok := m.vocab[b]
		if !ok {
			return nil, fmt.Errorf("tokenizer: model.merges[%d]: token %q is not in the vocab", rank, b)
		}
		pl := len(m.prefix)
		if len(b) < pl {
			return nil, fmt.Errorf("tokenizer: model.merges[%d]: token %q is shorter than continuing_subword_prefix %q", rank, b, m.prefix)
		}
		joined := a + b[pl:]
		newID, ok := m.vocab[joined]
		if !ok {
			return nil, fmt.Errorf("tokenizer: model.merges[%d]: merged token %q is not in the vocab", rank, joined)
		}
		m.merges.set(pairKey(aID, bID), mergeVal{int32(rank), newID}) // a later duplicate wins, as in tokenizers
		if m.joinable != nil {
			if a == "" || b == "" {
				m.joinable = nil
			} else {
				last, _ := utf8.DecodeLastRuneInString(a)
				first, _ := utf8.DecodeRuneInString(b)
				m.joinable[runePair(last, first)] = struct{}{}
			}
		}
	}
	return m, nil
}

// buildReverse fills the id -> token table. When two tokens share an id the
// smallest string wins (tokenizers keeps an arbitrary one).
func (m *bpeModel) buildReverse(maxID int32) {
	n := int(maxID) + 1
	if n <= 2*len(m.vocab)+1024 {
		m.idToTok = make([]string, n)
		m.hasTok = make([]bool, n)
		for tok, id := range m.vocab {
			if !m.hasTok[id] || tok < m.idToTok[id] {
				m.idToTok[id], m.hasTok[id] = tok, true
			}
		}
		return
	}
	m.sparse = make(map[int32]string, len(m.vocab))
	for tok, id := range m.vocab {
		if old, ok := m.sparse[id]; !ok || tok < old {
			m.sparse[id] = tok
		}
	}
}

// sharedIDs reports whether two tokens of the vocab have the same id.
func (m *bpeModel) sharedIDs() bool {
	if m.sparse != nil {
		return len(m.sparse) != len(m.vocab)
	}
	n := 0
	for _, ok := range m.hasTok {
		if ok {
			n++
		}
	}
	return n != len(m.vocab)
}

func (m *bpeModel) lookup(s string) int32 {
	if id, ok := m.vocab[s]; ok {
		return id
	}
	return -1
}

// token returns the string of id.
func (m *bpeModel) token(id int32) (string, bool) {
	if m.sparse != nil {
		s, ok := m.sparse[id]
		return s, ok
	}
	if id < 0 || int(id) >= len(m.idToTok) || !m.hasTok[id] {
		return "", false
	}
	return m.idToTok[id], true
}

// size is the number of entries of the vocab.
func (m *bpeModel) size() int { return len(m.vocab) }

// prepareByteLevel builds what tokenizing raw bytes needs (see byteID).
func (m *bpeModel) prepareByteLevel() {
	if !m.ignore {
		return
	}
	m.rawVocab = make(map[string]int32)
	keys := make([]string, 0, len(m.vocab))
	for tok := range m.vocab {
		keys = append(keys, tok)
	}
	sort.Strings(keys)
	for _, tok := range keys {
		if raw, ok := byteLevelRaw(tok); ok {
			m.rawVocab[raw] = m.vocab[tok]
		}
	}
}

// canDefer reports whether the model can take raw bytes for a byte-level
// pre-tokenizer (it can unless it adds prefixes or suffixes to characters).
func (m *bpeModel) canDefer() bool { return !m.hasPre && !m.hasSuf }

// tokenize appends the ids of one piece. With rawBytes the piece holds raw
// bytes that stand for their byte-level characters.
func (m *bpeModel) tokenize(dst []int32, text string, rawBytes bool) ([]int32, error) {
	if text == "" {
		return dst, nil
	}
	if m.ignore {
		var id int32
		var ok bool
		if rawBytes {
			id, ok = m.rawVocab[text]
		} else {
			id, ok = m.vocab[text]
		}
		if ok {
			return append(dst, id), nil
		}
	}
	if !rawBytes && m.joinable != nil && len(text) >= segmentMin {
		return m.tokenizeSegments(dst, text)
	}
	return m.tokenizeWord(dst, text, rawBytes)
}

// tokenizeSegments cuts text between characters that are both in the vocab
// and can never be joined, and merges each segment on its own: the result is
// the same, the merge queues are short and the segments hit the cache.
func (m *bpeModel) tokenizeSegments(dst []int32, text string) ([]int32, error) {
	start := 0
	var prev rune
	prevKnown := false
	var err error
	for i := 0; i < len(text); {
		r, size := runeAt(text, i)
		var known bool
		if size == 1 && r < utf8.RuneSelf {
			known = m.asciiID[r] >= 0
		} else {
			known = m.lookup(text[i:i+size]) >= 0
		}
		if i > start && known && prevKnown {
			if _, ok := m.joinable[runePair(prev, r)]; !ok {
				if dst, err = m.tokenizeWord(dst, text[start:i], false); err != nil {
					return dst, err
				}
				start = i
			}
		}
		prev, prevKnown = r, known
		i += size
	}
	return m.tokenizeWord(dst, text[start:], false)
}

// tokenizeWord merges one word, through the cache.
func (m *bpeModel) tokenizeWord(dst []int32, text string, rawBytes bool) ([]int32, error) {
	if ids, ok := m.cache.get(text); ok {
		return append(dst, ids...), nil
	}
	w := m.words.Get().(*word)
	defer m.words.Put(w)
	w.reset()
	var err error
	if rawBytes {
		err = m.initBytes(w, text)
	} else {
		err = m.initChars(w, text)
	}
	if err != nil {
		return dst, err
	}
	w.mergeAll(m.merges)
	n := len(dst)
	dst = w.appendIDs(dst)
	m.cache.put(text, dst[n:])
	return dst, nil
}

// unkState is the pending unknown token of merge_word.
type unkState struct {
	id, size int32
	set      bool
}

func (m *bpeModel) flushUnk(w *word, u *unkState) {
	if u.set {
		w.add(u.id, int(u.size))
		u.set = false
	}
}

// unknown handles a character that is not in the vocab: byte fallback, else
// the unknown token (fused with a pending one when fuse_unk), else nothing.
func (m *bpeModel) unknown(w *word, u *unkState, s string, size int) error {
	if m.fallback {
		ok := true
		for i := 0; i < len(s); i++ {
			if m.fbID[s[i]] < 0 {
				ok = false
				break
			}
		}
		if ok {
			for i := 0; i < len(s); i++ {
				w.add(m.fbID[s[i]], 1)
			}
			return nil
		}
	}
	if !m.hasUnk {
		return nil
	}
	if u.set && m.fuseUnk {
		u.size += int32(size)
		return nil
	}
	if u.set {
		w.add(u.id, int(u.size))
	}
	id, ok := m.vocab[m.unk]
	if !ok {
		return fmt.Errorf("tokenizer: unk_token %q is not in the vocab", m.unk)
	}
	*u = unkState{id, int32(size), true}
	return nil
}

// initChars fills w with one symbol per character of text (merge_word).
func (m *bpeModel) initChars(w *word, text string) error {
	var u unkState
	var sb strings.Builder
	for i := 0; i < len(text); {
		size := 1
		if text[i] >= utf8.RuneSelf {
			_, size = utf8.DecodeRuneInString(text[i:])
		}
		end := i + size
		s := text[i:end]
		addPre, addSuf := m.hasPre && i > 0, m.hasSuf && end == len(text)
		var id int32 = -1
		if !addPre && !addSuf {
			if size == 1 && text[i] < utf8.RuneSelf {
				id = m.asciiID[text[i]]
			} else {
				id = m.lookup(s)
			}
		} else {
			sb.Reset()
			if addPre {
				sb.WriteString(m.prefix)
			}
			sb.WriteString(s)
			if addSuf {
				sb.WriteString(m.suffix)
			}
			s = sb.String()
			id = m.lookup(s)
		}
		if id >= 0 {
			m.flushUnk(w, &u)
			w.add(id, size)
		} else if err := m.unknown(w, &u, s, size); err != nil {
			return err
		}
		i = end
	}
	m.flushUnk(w, &u)
	return nil
}

// initBytes is initChars for raw bytes standing for byte-level characters.
func (m *bpeModel) initBytes(w *word, text string) error {
	var u unkState
	for i := 0; i < len(text); i++ {
		b := text[i]
		if id := m.byteID[b]; id >= 0 {
			m.flushUnk(w, &u)
			w.add(id, 1)
		} else if err := m.unknown(w, &u, byteToStr[b], 1); err != nil {
			return err
		}
	}
	m.flushUnk(w, &u)
	return nil
}
