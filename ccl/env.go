package ccl

import (
	"fmt"
	"os"
	"strconv"
)

// EnvInt reads the tuning variable name (bytes or a count): def when it
// is unset or empty, else its value, which must be an integer of at least
// min. A bad value gives def and an error naming the variable, which the
// backend's Join returns (wrapped in ErrBadArgs): a mistyped knob must
// not silently run the default.
func EnvInt(name string, def, min int) (int, error) {
	return parseEnvInt(name, os.Getenv(name), def, min)
}

func parseEnvInt(name, v string, def, min int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min {
		return def, fmt.Errorf("%s=%q: want an integer of at least %d", name, v, min)
	}
	return n, nil
}
