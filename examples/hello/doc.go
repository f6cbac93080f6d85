// Hello is the first program of docs/getting-started.md: a function registered on
// every worker, a process session of 4 workers (this program re-executed
// 4 times, each a worker from worker.Main on), one call on all of them.
//
//	go run ./examples/hello
package main
