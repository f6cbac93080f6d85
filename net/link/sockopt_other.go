//go:build !linux

package link

import (
	"errors"
	"fmt"
	"net"
)

// SetNotSentLowat needs Linux's TCP_NOTSENT_LOWAT.
func SetNotSentLowat(c net.Conn, n int) error {
	return fmt.Errorf("link: TCP_NOTSENT_LOWAT: %w on this system", errors.ErrUnsupported)
}
