package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// rtcDevice is the hardware clock the kernel reads at boot.
const rtcDevice = "/dev/rtc0"

// setClock sets the system clock (settimeofday) and then the hardware
// clock, so the time survives a reboot; a box without an RTC device keeps
// the setting until the next boot.
func setClock(_ context.Context, t time.Time) error {
	tv := unix.NsecToTimeval(t.UnixNano())
	if err := unix.Settimeofday(&tv); err != nil {
		return fmt.Errorf("clock: settimeofday: %w", err)
	}
	f, err := os.Open(rtcDevice)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("clock: system time set, hardware clock not: %w", err)
	}
	defer f.Close()
	u := t.UTC()
	rtc := unix.RTCTime{Sec: int32(u.Second()), Min: int32(u.Minute()), Hour: int32(u.Hour()),
		Mday: int32(u.Day()), Mon: int32(u.Month()) - 1, Year: int32(u.Year()) - 1900,
		Wday: int32(u.Weekday()), Yday: int32(u.YearDay()) - 1}
	if err := unix.IoctlSetRTCTime(int(f.Fd()), &rtc); err != nil {
		return fmt.Errorf("clock: system time set, hardware clock not: %w", err)
	}
	return nil
}
