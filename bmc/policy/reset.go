package policy

import (
	"context"
	"errors"
	"fmt"

	"cxlpool/bmc"
)

// ResetHead implements bmc.HeadResetter:
//
//	On                        power on, then HeadFence.Recover
//	ForceOff                  HeadFence.Fence, then power off
//	PowerCycle, ForceRestart  Fence, off, wait CycleOff, on, Recover
//
// Power is never cut unless Fence succeeded; if cutting it fails, Recover
// lifts the fence again. A head already in the requested state is left
// alone (On still recovers, to reconcile after an earlier failure). One
// reset per head runs at a time; a second gets bmc.ErrBusy.
func (l *Loop) ResetHead(ctx context.Context, host int, t bmc.ResetType) error {
	switch t {
	case bmc.ResetOn, bmc.ResetForceOff, bmc.ResetPowerCycle, bmc.ResetForceRestart:
	default:
		return fmt.Errorf("policy: reset type %q: %w", t, bmc.ErrInvalid)
	}
	if t != bmc.ResetOn && l.cfg.Fence == nil {
		return fmt.Errorf("policy: head %d %s: no capacity fence configured: %w", host, t, bmc.ErrUnsupported)
	}
	heads, err := l.cfg.Board.HeadPower(ctx)
	if err != nil {
		return fmt.Errorf("policy: head %d: %w", host, err)
	}
	if host < 0 || host >= len(heads) {
		return fmt.Errorf("policy: head %d of %d: %w", host, len(heads), bmc.ErrNotFound)
	}
	l.mu.Lock()
	if l.busy[host] {
		l.mu.Unlock()
		return fmt.Errorf("policy: head %d: reset in progress: %w", host, bmc.ErrBusy)
	}
	l.busy[host] = true
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.busy, host)
		l.mu.Unlock()
	}()

	on := heads[host].State == bmc.PowerOn
	switch t {
	case bmc.ResetOn:
		return l.powerOn(ctx, host, on)
	case bmc.ResetForceOff:
		if !on {
			return nil
		}
		return l.powerOff(ctx, host)
	}
	if on {
		if err := l.powerOff(ctx, host); err != nil {
			return err
		}
		if err := l.cfg.Sleep(ctx, l.cfg.CycleOff); err != nil {
			// The head stays off and fenced; an On later recovers it.
			return fmt.Errorf("policy: head %d power cycle interrupted while off: %w", host, err)
		}
	}
	return l.powerOn(ctx, host, false)
}

// powerOff fences the head's capacity and cuts its power.
func (l *Loop) powerOff(ctx context.Context, host int) error {
	if err := l.cfg.Fence.Fence(ctx, host); err != nil {
		rerr := l.cfg.Fence.Recover(ctx, host)
		return errors.Join(fmt.Errorf("policy: head %d: fence failed, power left on: %w", host, err), rerr)
	}
	if err := l.cfg.Board.SetHeadPower(ctx, host, bmc.PowerOff); err != nil {
		rerr := l.cfg.Fence.Recover(ctx, host)
		return errors.Join(fmt.Errorf("policy: head %d: power off: %w", host, err), rerr)
	}
	l.log.Info("policy: head powered off", "host", host)
	return nil
}

// powerOn switches the head on (unless it already is) and reconciles its
// capacity.
func (l *Loop) powerOn(ctx context.Context, host int, alreadyOn bool) error {
	if !alreadyOn {
		if err := l.cfg.Board.SetHeadPower(ctx, host, bmc.PowerOn); err != nil {
			return fmt.Errorf("policy: head %d: power on: %w", host, err)
		}
		l.log.Info("policy: head powered on", "host", host)
	}
	if l.cfg.Fence == nil {
		return nil
	}
	if err := l.cfg.Fence.Recover(ctx, host); err != nil {
		return fmt.Errorf("policy: head %d: recover after power on: %w", host, err)
	}
	return nil
}
