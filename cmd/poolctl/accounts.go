package main

import (
	"context"
	"fmt"
	"strconv"

	"cxlpool/api/client"
)

// accountOut is an account in --json output.
type accountOut struct {
	ID      string `json:"id"`
	URI     string `json:"uri"`
	User    string `json:"user"`
	Role    string `json:"role"`
	System  string `json:"system,omitempty"`
	Enabled bool   `json:"enabled"`
	Locked  bool   `json:"locked"`
}

func toAccountOut(acc client.Account) accountOut {
	return accountOut{ID: acc.ID, URI: acc.ODataID, User: acc.UserName, Role: acc.RoleID,
		System: acc.SystemID(), Enabled: acc.Enabled, Locked: acc.Locked}
}

func cmdAccounts(ctx context.Context, a *app, args []string) error {
	sub := "list"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		sub, args = args[0], args[1:]
	}
	switch sub {
	case "list":
		return accountsList(ctx, a, args)
	case "add":
		return accountsAdd(ctx, a, args)
	case "remove", "rm", "delete":
		return accountsRemove(ctx, a, args)
	case "unlock":
		return accountsUnlock(ctx, a, args)
	}
	return usagef("accounts: unknown subcommand %q (list, add, remove, unlock)", sub)
}

func accountsList(ctx context.Context, a *app, args []string) error {
	return list(ctx, a, "accounts list", args,
		func(ctx context.Context, c *client.Client) ([]accountOut, error) {
			return convert(toAccountOut)(c.Accounts(ctx))
		},
		[]string{"ID", "USER", "ROLE", "SYSTEM", "ENABLED", "LOCKED"},
		func(o accountOut) []string {
			return []string{o.ID, o.User, o.Role, orDash(o.System), yesNo(o.Enabled), yesNo(o.Locked)}
		})
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func accountsAdd(ctx context.Context, a *app, args []string) error {
	fs := a.flags("accounts add", "NAME --role ROLE [--system HostN] [--new-password-file FILE] [--temporary]")
	role := fs.String("role", "", "`role`: Administrator, Operator, ReadOnly or HostUser")
	system := fs.String("system", "", "the ComputerSystem a HostUser account is bound to (`HostN`)")
	pwFile := fs.String("new-password-file", "", "read the new account's password from the first line of `file` "+
		"(default: prompt on a terminal, else the next line of standard input)")
	temporary := fs.Bool("temporary", false, "make the password temporary: the account must choose its own "+
		"(`poolctl passwd`) before it may do anything else")
	pos, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *role == "" {
		return usagef("accounts add: --role is required")
	}
	ctx, cancel := a.deadline(ctx, false)
	defer cancel()
	if *system != "" {
		// Any spelling of the host, as everywhere else: host5, 5, Host5.
		id, err := systemArg(*system)
		if err != nil {
			return fmt.Errorf("accounts add: %w", err)
		}
		*system = id
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	pw, err := a.newPassword(pos[0], *pwFile)
	if err != nil {
		return fmt.Errorf("accounts add: %w", err)
	}
	acc, err := c.CreateAccount(ctx, client.NewAccount{UserName: pos[0], Password: pw, RoleID: *role, SystemID: *system,
		PasswordChangeRequired: *temporary})
	if err != nil {
		return withResolution(explain(err))
	}
	if a.g.json {
		return a.printJSON(toAccountOut(acc))
	}
	bound := ""
	if s := acc.SystemID(); s != "" {
		bound = ", bound to " + s
	}
	fmt.Fprintf(a.stdout, "Created account %s (id %s, role %s%s).\n", acc.UserName, acc.ID, acc.RoleID, bound)
	// The password is the one just given, not the administrator's own:
	// say how it reaches its user.
	fmt.Fprintf(a.stdout, "Give %s the password you entered over a trusted channel; they sign in with\n"+
		"  poolctl --server %s --user %s login\n", acc.UserName, a.g.server, acc.UserName)
	if *temporary {
		fmt.Fprintf(a.stdout, "The password is temporary: %s must choose their own first (poolctl --user %s passwd).\n",
			acc.UserName, acc.UserName)
	} else {
		fmt.Fprintf(a.stdout, "They can then choose their own with `poolctl passwd` (or create the account with --temporary to make them).\n")
	}
	return nil
}

// findAccount finds an account by user name, else by Id.
func findAccount(accts []client.Account, arg string) *client.Account {
	for i, acc := range accts {
		if acc.UserName == arg {
			return &accts[i]
		}
	}
	if _, err := strconv.Atoi(arg); err == nil {
		for i, acc := range accts {
			if acc.ID == arg {
				return &accts[i]
			}
		}
	}
	return nil
}

// accountArg parses a subcommand's one NAME|ID argument and finds that
// account.
func (a *app) accountArg(ctx context.Context, cmd string, args []string) (*client.Client, *client.Account, error) {
	fs := a.flags(cmd, "NAME|ID")
	pos, err := parse(fs, args, 1, 1)
	if err != nil {
		return nil, nil, err
	}
	c, err := a.client()
	if err != nil {
		return nil, nil, err
	}
	accts, err := c.Accounts(ctx)
	if err != nil {
		return nil, nil, explain(err)
	}
	found := findAccount(accts, pos[0])
	if found == nil {
		return nil, nil, fmt.Errorf("%s: no account %q", cmd, pos[0])
	}
	return c, found, nil
}

// accountsUnlock ends an account's lockout after failed sign-ins (DMTF:
// PATCH the ManagerAccount with Locked false), from every address.
func accountsUnlock(ctx context.Context, a *app, args []string) error {
	ctx, cancel := a.deadline(ctx, false)
	defer cancel()
	c, found, err := a.accountArg(ctx, "accounts unlock", args)
	if err != nil {
		return err
	}
	wasLocked := found.Locked
	if _, err := c.Patch(ctx, found.ODataID, map[string]any{"Locked": false}); err != nil {
		return explain(err)
	}
	found.Locked = false
	if a.g.json {
		return a.printJSON(toAccountOut(*found))
	}
	if wasLocked {
		fmt.Fprintf(a.stdout, "Unlocked account %s (id %s).\n", found.UserName, found.ID)
	} else {
		fmt.Fprintf(a.stdout, "Account %s (id %s) was not locked; its failed sign-ins are forgotten.\n", found.UserName, found.ID)
	}
	return nil
}

func accountsRemove(ctx context.Context, a *app, args []string) error {
	ctx, cancel := a.deadline(ctx, false)
	defer cancel()
	c, found, err := a.accountArg(ctx, "accounts remove", args)
	if err != nil {
		return err
	}
	if err := c.DeleteAndWait(ctx, found.ODataID, nil); err != nil {
		return explain(err)
	}
	if a.g.json {
		return a.printJSON(toAccountOut(*found))
	}
	fmt.Fprintf(a.stdout, "Removed account %s (id %s).\n", found.UserName, found.ID)
	return nil
}
