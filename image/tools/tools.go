//go:build tools

// Package tools pins the u-root builder and the u-root commands built
// into the image (image/build DefaultCommands), so that go.mod keeps
// their dependencies: nothing imports them otherwise, and "go mod tidy"
// would drop them. Keep the list in step with DefaultCommands.
package tools

import (
	_ "github.com/u-root/u-root"
	_ "github.com/u-root/u-root/cmds/core/cat"
	_ "github.com/u-root/u-root/cmds/core/cp"
	_ "github.com/u-root/u-root/cmds/core/date"
	_ "github.com/u-root/u-root/cmds/core/df"
	_ "github.com/u-root/u-root/cmds/core/dmesg"
	_ "github.com/u-root/u-root/cmds/core/echo"
	_ "github.com/u-root/u-root/cmds/core/find"
	_ "github.com/u-root/u-root/cmds/core/free"
	_ "github.com/u-root/u-root/cmds/core/gosh"
	_ "github.com/u-root/u-root/cmds/core/grep"
	_ "github.com/u-root/u-root/cmds/core/hexdump"
	_ "github.com/u-root/u-root/cmds/core/init"
	_ "github.com/u-root/u-root/cmds/core/insmod"
	_ "github.com/u-root/u-root/cmds/core/ip"
	_ "github.com/u-root/u-root/cmds/core/kill"
	_ "github.com/u-root/u-root/cmds/core/ln"
	_ "github.com/u-root/u-root/cmds/core/ls"
	_ "github.com/u-root/u-root/cmds/core/lsmod"
	_ "github.com/u-root/u-root/cmds/core/mkdir"
	_ "github.com/u-root/u-root/cmds/core/more"
	_ "github.com/u-root/u-root/cmds/core/mount"
	_ "github.com/u-root/u-root/cmds/core/mv"
	_ "github.com/u-root/u-root/cmds/core/netstat"
	_ "github.com/u-root/u-root/cmds/core/ping"
	_ "github.com/u-root/u-root/cmds/core/ps"
	_ "github.com/u-root/u-root/cmds/core/rm"
	_ "github.com/u-root/u-root/cmds/core/shutdown"
	_ "github.com/u-root/u-root/cmds/core/sleep"
	_ "github.com/u-root/u-root/cmds/core/sync"
	_ "github.com/u-root/u-root/cmds/core/tail"
	_ "github.com/u-root/u-root/cmds/core/umount"
	_ "github.com/u-root/u-root/cmds/core/uname"
	_ "github.com/u-root/u-root/cmds/core/uptime"
)
