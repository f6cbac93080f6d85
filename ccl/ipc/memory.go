package ipc

import (
	"errors"
	"fmt"

	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/gpu/device"
)

// Memory is what the allocator needs from this rank's GPU. CUDAMemory is
// the real one; tests use a host fake, so the collective allocation
// protocol (order checks, pooling, handle exchange, close) is tested
// without a GPU.
type Memory interface {
	// Alloc makes n bytes of device memory and its IPC handle.
	Alloc(n int64) (uint64, cuda.IpcMemHandle, error)
	// Zero clears n bytes at p and returns once that is done on the device.
	Zero(p uint64, n int64) error
	Free(p uint64) error
	// Open maps a peer process's allocation; Close unmaps it.
	Open(h cuda.IpcMemHandle) (uint64, error)
	Close(p uint64) error
	// EnablePeer lets this device address memory of another device of the
	// same process (threaded sessions); ReleasePeers undoes every one.
	EnablePeer(ordinal int) error
	ReleasePeers() error
	// Sync waits for the rank's queued device work.
	Sync() error
}

// CUDAMemory is Memory on the CUDA driver, every call through the rank's
// device executor (context current, its stream).
type CUDAMemory struct {
	Driver *cuda.Driver
	Exec   func(fn func(stream uintptr) error) error
	peers  []cuda.Device
}

func (m *CUDAMemory) Alloc(n int64) (uint64, cuda.IpcMemHandle, error) {
	var p cuda.DevicePtr
	var h cuda.IpcMemHandle
	err := m.Exec(func(uintptr) error {
		var err error
		if p, err = m.Driver.MemAlloc(n); err != nil {
			return err
		}
		if h, err = m.Driver.IpcGetMemHandle(p); err != nil {
			m.Driver.MemFree(p)
		}
		return err
	})
	return uint64(p), h, err
}

func (m *CUDAMemory) Zero(p uint64, n int64) error {
	return m.Exec(func(s uintptr) error {
		// Zero synchronizes, which would spoil a graph capture.
		if st, err := m.Driver.StreamIsCapturing(cuda.Stream(s)); err != nil || st != cuda.CaptureNone {
			if err == nil {
				err = device.ErrCapturing
			}
			return err
		}
		if err := m.Driver.MemsetD8Async(cuda.DevicePtr(p), 0, n, cuda.Stream(s)); err != nil {
			return err
		}
		return m.Driver.StreamSynchronize(cuda.Stream(s))
	})
}

func (m *CUDAMemory) Free(p uint64) error {
	return m.Exec(func(uintptr) error { return m.Driver.MemFree(cuda.DevicePtr(p)) })
}

func (m *CUDAMemory) Open(h cuda.IpcMemHandle) (uint64, error) {
	var p cuda.DevicePtr
	err := m.Exec(func(uintptr) error {
		var err error
		p, err = m.Driver.IpcOpenMemHandle(h, cuda.IpcLazyEnablePeerAccess)
		return err
	})
	return uint64(p), err
}

func (m *CUDAMemory) Close(p uint64) error {
	return m.Exec(func(uintptr) error { return m.Driver.IpcCloseMemHandle(cuda.DevicePtr(p)) })
}

func (m *CUDAMemory) EnablePeer(ordinal int) error {
	return m.Exec(func(uintptr) error {
		d := m.Driver
		dev, err := d.DeviceGet(ordinal)
		if err != nil {
			return err
		}
		ctx, err := d.PrimaryCtxRetain(dev)
		if err != nil {
			return err
		}
		if err := d.EnablePeerAccess(ctx); err != nil {
			var ce *cuda.Error
			if !errors.As(err, &ce) || ce.Code != 704 { // CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
				d.PrimaryCtxRelease(dev)
				return fmt.Errorf("enable peer access to cuda:%d: %w", ordinal, err)
			}
		}
		m.peers = append(m.peers, dev)
		return nil
	})
}

func (m *CUDAMemory) ReleasePeers() error {
	return m.Exec(func(uintptr) error {
		var errs []error
		for _, dev := range m.peers {
			errs = append(errs, m.Driver.PrimaryCtxRelease(dev))
		}
		m.peers = nil
		return errors.Join(errs...)
	})
}

func (m *CUDAMemory) Sync() error {
	return m.Exec(func(s uintptr) error { return m.Driver.StreamSynchronize(cuda.Stream(s)) })
}
