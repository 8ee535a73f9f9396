package main

import "context"

func cmdStatus(ctx context.Context, a *app, args []string) error      { return usagef("todo") }
func cmdHosts(ctx context.Context, a *app, args []string) error       { return usagef("todo") }
func cmdChunks(ctx context.Context, a *app, args []string) error      { return usagef("todo") }
func cmdConnections(ctx context.Context, a *app, args []string) error { return usagef("todo") }
func cmdRequest(ctx context.Context, a *app, args []string) error     { return usagef("todo") }
func cmdShare(ctx context.Context, a *app, args []string) error       { return usagef("todo") }
func cmdRelease(ctx context.Context, a *app, args []string) error     { return usagef("todo") }
func cmdFree(ctx context.Context, a *app, args []string) error        { return usagef("todo") }
