//go:build !race

package mscclpptests_test

const raceEnabled = false
