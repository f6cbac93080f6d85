// Package loopback gives tests both ends of a TCP connection on
// 127.0.0.1, closed at the test's cleanup.
package loopback
