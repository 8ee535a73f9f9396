//go:build !(linux && boxinit)

package main

import "context"

// uinit: without the boxinit tag this binary is only the daemon.
func uinit(context.Context, []string) (bool, error) { return false, nil }
