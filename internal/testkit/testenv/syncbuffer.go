package testenv

import (
	"bytes"
	"sync"
)

// SyncBuffer is a bytes.Buffer safe for concurrent writers, such as the
// loggers of a command's goroutines. If OnWrite is set, it is called with
// the buffer's contents after each write, under the buffer's lock (it must
// not write to the buffer). The zero value is an empty buffer.
type SyncBuffer struct {
	OnWrite func(string)

	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p; it never fails.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.b.Write(p)
	if b.OnWrite != nil {
		b.OnWrite(b.b.String())
	}
	return n, err
}

// String returns what was written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
