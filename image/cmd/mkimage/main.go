// Command mkimage builds the box image (see package cxlpool/image/build
// and image/README.md):
//
//	mkimage -out bin/image -version 1.0.0 -security-version 1
//
// The signing key is the PEM file named by IMAGE_SIGNING_KEY, or a
// development key generated on first use at image/.keys/dev-signing.key.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"cxlpool/image/build"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "bin/image", "output directory")
	version := fs.String("version", "dev", "image version")
	secver := fs.Uint64("security-version", 1, "rollback index: boxes refuse images below their minimum")
	repo := fs.String("repo", ".", "cxlpool source tree (where go.mod is)")
	kernel := fs.String("kernel", "", "kernel release (default: newest installed)")
	install := fs.Bool("install", true, "apt-get install missing packages (linux-image-amd64, xz-utils, e2fsprogs)")
	dataCfg := fs.String("data-config", "", "file to install as cxlpool.conf on the data partition")
	sbKey := fs.String("sb-key", os.Getenv("IMAGE_SB_KEY"), "PEM key (unencrypted) that signs the ESP's loader.efi for UEFI Secure Boot, a db key of the boards (default: the development key, OVMF's snakeoil test key)")
	sbCert := fs.String("sb-cert", os.Getenv("IMAGE_SB_CERT"), "PEM certificate of -sb-key")
	providers := fs.String("verbs-providers", strings.Join(build.DefaultVerbsProviders(), ","), "rdma-core providers linked into the daemon, comma-separated (rxe for soft-RoCE; add the board's RDMA NIC's: mlx5, bnxt_re, irdma, …)")
	extraModules := fs.String("extra-modules", "", "more kernel modules for the image, comma-separated (their dependencies come from modules.dep), e.g. mlx5_ib for a board's RDMA NIC")
	verbose := fs.Bool("v", false, "show the tools' output")
	if err := fs.Parse(args); err != nil {
		return err
	}
	root, err := filepath.Abs(*repo)
	if err != nil {
		return err
	}
	outDir, err := filepath.Abs(*out)
	if err != nil {
		return err
	}
	cfg := build.Config{Repo: root, Out: outDir, Version: *version, SecurityVersion: *secver,
		SigningKey: os.Getenv("IMAGE_SIGNING_KEY"), DevKey: filepath.Join(root, "image", ".keys", "dev-signing.key"),
		Kernel: *kernel, InstallPackages: *install,
		Logger: slog.New(slog.NewTextHandler(stderr, nil))}
	cfg.VerbsProviders = strings.Split(*providers, ",")
	if *extraModules != "" {
		cfg.Modules = append(build.DefaultModules(), strings.Split(*extraModules, ",")...)
	}
	if (*sbKey == "") != (*sbCert == "") {
		return fmt.Errorf("-sb-key and -sb-cert go together (the key signs, the certificate goes into the signature)")
	}
	cfg.SecureBoot = build.SecureBootKey{Key: *sbKey, Cert: *sbCert}
	if *verbose {
		cfg.Stderr = stderr
	}
	if *dataCfg != "" {
		b, err := os.ReadFile(*dataCfg)
		if err != nil {
			return err
		}
		cfg.DataConfig = string(b)
	}
	res, err := build.Build(ctx, cfg)
	if err != nil {
		return err
	}
	build.Report(stdout, res)
	return nil
}
