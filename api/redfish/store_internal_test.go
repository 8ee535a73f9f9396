package redfish

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func fixedClock() time.Time { return time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC) }

// TestAccountIDsNeverReused: deleting the account with the largest Id and
// restarting does not give that Id to the next account, and each account
// has its own UID, kept across restarts and updates.
func TestAccountIDsNeverReused(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), AccountsFile)
	st, err := openStore(ctx, path, fixedClock)
	if err != nil {
		t.Fatal(err)
	}
	var made []Account
	for _, name := range []string{"a", "b", "c"} {
		a, err := st.CreateAccount(ctx, Account{UserName: name, PasswordHash: "x", Role: RoleOperator, Enabled: true})
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, a)
	}
	if made[0].UID == made[1].UID || len(made[0].UID) != 32 {
		t.Fatalf("UIDs %q %q: want distinct 32-digit identities", made[0].UID, made[1].UID)
	}
	if err := st.DeleteAccount(ctx, made[2].ID); err != nil {
		t.Fatal(err)
	}
	up := made[1]
	up.Role = RoleReadOnly
	up.UID = "forged"
	if up, err = st.UpdateAccount(ctx, up); err != nil || up.UID != made[1].UID {
		t.Fatalf("UpdateAccount: UID %q (%v), want the unchanged %q", up.UID, err, made[1].UID)
	}
	if err := st.close(); err != nil {
		t.Fatal(err)
	}
	st, err = openStore(ctx, path, fixedClock)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	d, err := st.CreateAccount(ctx, Account{UserName: "c", PasswordHash: "x", Role: RoleHostUser, Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	if d.ID <= made[2].ID || d.UID == made[2].UID {
		t.Errorf("after deleting Id %d and a restart: new account Id %d, UID %q; want a larger Id and a new UID", made[2].ID, d.ID, d.UID)
	}
	got, _ := st.AccountByUID(made[0].UID)
	if got.ID != made[0].ID {
		t.Errorf("after a restart the UID %q names account %d, want %d", made[0].UID, got.ID, made[0].ID)
	}
}

// TestStoreMigrationGivesUIDs: a version-2 accounts database (Ids that
// SQLite could reuse, owners by name) keeps its accounts and Ids, gets a
// UID for each, binds subscriptions to their owners' UIDs, and never
// reuses an Id from then on.
func TestStoreMigrationGivesUIDs(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), AccountsFile)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	stmts := []string{`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL) STRICT`}
	stmts = append(stmts, storeMigrations[:2]...)
	stmts = append(stmts,
		`INSERT INTO schema_migrations VALUES (1, 0), (2, 0)`,
		`INSERT INTO accounts (id, username, password_hash, role, enabled, created, updated) VALUES
			(1, 'admin', 'x', 'Administrator', 1, 0, 0), (7, 'ops', 'x', 'Operator', 1, 0, 0)`,
		`INSERT INTO subscriptions (destination, context, protocol, registry_prefixes, message_ids, owner, created)
			VALUES ('https://siem.example/ev', '', 'Redfish', '[]', '[]', 'ops', 0)`)
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	st, err := openStore(ctx, path, fixedClock)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	var ids []int64
	uids := map[string]bool{}
	for _, a := range st.Accounts() {
		ids = append(ids, a.ID)
		uids[a.UID] = len(a.UID) == 32
	}
	if diff := cmp.Diff([]int64{1, 7}, ids); diff != "" {
		t.Errorf("Ids after the migration (-want +got):\n%s", diff)
	}
	if len(uids) != 2 || !uids[st.Accounts()[0].UID] || !uids[st.Accounts()[1].UID] {
		t.Errorf("UIDs after the migration: %v, want two distinct 32-digit ones", uids)
	}
	subs, err := st.Subscriptions(ctx)
	if err != nil || len(subs) != 1 {
		t.Fatalf("subscriptions: %v %v", subs, err)
	}
	ops, _ := st.AccountByName("ops")
	if subs[0].OwnerUID != ops.UID {
		t.Errorf("subscription owner UID %q, want ops's %q", subs[0].OwnerUID, ops.UID)
	}
	if err := st.DeleteAccount(ctx, 7); err != nil {
		t.Fatal(err)
	}
	n, err := st.CreateAccount(ctx, Account{UserName: "new", PasswordHash: "x", Role: RoleHostUser, Enabled: true})
	if err != nil || n.ID != 8 {
		t.Errorf("account after deleting Id 7: Id %d (%v), want 8", n.ID, err)
	}
}
