package tokenizer

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidUTF8 is returned by Encode for text that is not valid UTF-8.
// The Hugging Face library only accepts Unicode strings, so there is no
// reference behaviour to copy; callers that want a lossy conversion can use
// strings.ToValidUTF8 first.
var ErrInvalidUTF8 = errors.New("tokenizer: text is not valid UTF-8")

// unsupported reports a tokenizer.json value this package refuses.
func unsupported(field, value string, supported ...string) error {
	if len(supported) == 0 {
		return fmt.Errorf("tokenizer: %s %q is not supported", field, value)
	}
	return fmt.Errorf("tokenizer: %s %q is not supported (supported: %s)",
		field, value, strings.Join(supported, ", "))
}
