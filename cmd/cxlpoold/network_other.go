//go:build !linux

package main

import (
	"context"
	"log/slog"

	"cxlpool/api"
)

// imageNetwork is Linux-only: the box image is Linux.
func imageNetwork(context.Context, *slog.Logger) api.NetworkConfig { return nil }
