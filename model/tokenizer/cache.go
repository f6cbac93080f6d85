package tokenizer

import (
	"strings"
	"sync"
)

const (
	cacheCapacity  = 1 << 16 // words; the cache is emptied when full
	cacheMaxLength = 256     // bytes; longer pieces are not cached (as in tokenizers)
)

// wordCache maps a piece of text to its token ids. It is safe for
// concurrent use.
type wordCache struct {
	mu sync.RWMutex
	m  map[string][]int32
}

func newWordCache() *wordCache {
	return &wordCache{m: make(map[string][]int32)}
}

func (c *wordCache) get(s string) ([]int32, bool) {
	c.mu.RLock()
	ids, ok := c.m[s]
	c.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(s string, ids []int32) {
	if len(s) >= cacheMaxLength {
		return
	}
	stored := append([]int32(nil), ids...)
	key := strings.Clone(s) // s may point into a large input
	c.mu.Lock()
	if len(c.m) >= cacheCapacity {
		clear(c.m)
	}
	c.m[key] = stored
	c.mu.Unlock()
}
