//go:build linux

// Command boxloader is the uinit of the box's loader stage (see package
// cxlpool/image/loader): it finds the box disk, picks and verifies a
// slot and kexecs into it. When the box cannot boot it says why and keeps
// a u-root shell on the console (run boxloader there to try again)
// instead of rebooting in a loop.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"cxlpool/image/loader"
)

var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var out io.Writer = os.Stdout
	console, err := os.OpenFile("/dev/console", os.O_WRONLY, 0)
	if err == nil {
		out = console
	}
	// u-root's purgatory loader logs its ELF structures with the standard
	// logger; the console is for the boot's story.
	log.SetOutput(io.Discard)
	err = run(ctx, os.Args[1:], out, console)
	if err == nil {
		return
	}
	fmt.Fprintf(out, "boxloader: the box cannot boot: %v\n", err)
	fmt.Fprintln(out, "boxloader: staying in the loader with a shell on the console; fix the disk (make flash) or push an image, then run boxloader again")
	if os.Getpid() != 1 && os.Getppid() != 1 {
		// Run by hand from the shell: just report.
		os.Exit(1)
	}
	shell(ctx, out)
}

func run(ctx context.Context, args []string, out io.Writer, console *os.File) error {
	fs := flag.NewFlagSet("boxloader", flag.ContinueOnError)
	fs.SetOutput(out)
	diskFlag := fs.String("disk", "", "box disk (default: cxlpool.loader.disk= or a scan for the cxlpool partitions)")
	keys := fs.String("keys", loader.DefaultKeysDir, "trusted update keys")
	work := fs.String("work", loader.DefaultWorkDir, "tmpfs the slot's kernel and initramfs are extracted to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cl, _ := os.ReadFile("/proc/cmdline")
	opt, err := loader.ParseOptions(string(cl))
	if err != nil {
		fmt.Fprintf(out, "boxloader: %v (ignored)\n", err)
	}
	if *diskFlag != "" {
		opt.Disk = *diskFlag
	}
	if err := loader.MountWorkDir(*work); err != nil {
		fmt.Fprintf(out, "boxloader: %v (extracting to the initramfs instead)\n", err)
	}
	l := loader.New(loader.Config{Out: out, System: loader.Linux{Console: console}, Cmdline: string(cl), Options: opt, KeysDir: *keys,
		ModulesFile: loader.ModulesFile, ModulesDir: filepath.Join("/lib/modules", loader.KernelRelease()), WorkDir: *work})
	l.Printf("version %s", version)
	return l.Run(ctx)
}

// shell keeps an operator shell on the console, restarting it when it
// exits (as getty would): the loader never reboots by itself.
func shell(ctx context.Context, out io.Writer) {
	for ctx.Err() == nil {
		tty, err := os.OpenFile("/dev/console", os.O_RDWR, 0)
		if err != nil {
			fmt.Fprintf(out, "boxloader: console shell: %v\n", err)
			<-ctx.Done()
			return
		}
		cmd := exec.CommandContext(ctx, "/bin/defaultsh")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		start := time.Now()
		_ = cmd.Run()
		tty.Close()
		if time.Since(start) < time.Second {
			// A shell that cannot start must not spin.
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Second):
			}
		}
	}
}
