package redfish

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/crypto/bcrypt"
)

// The AccountService, whose accounts the service authenticates.
const (
	AccountServiceURI = "/redfish/v1/AccountService"
	AccountsURI       = AccountServiceURI + "/Accounts"
)

func AccountURI(id int64) string { return AccountsURI + "/" + strconv.FormatInt(id, 10) }

// Session table and sign-in throttling bounds.
const (
	// maxSessions bounds the whole table; adminSessionReserve of it is
	// kept for Administrators, so that no other account (nor all of
	// them together) can keep an administrator from signing in.
	maxSessions         = 256
	adminSessionReserve = 32
	maxLockoutEntries   = 4096
	basicCacheTTL       = time.Minute
	// maxSignInDelay caps the growing wait between failed sign-ins of
	// one account from one address.
	maxSignInDelay = 30 * time.Second
	// maxKeptUserName bounds the user names failures are counted under
	// (longer than any account's).
	maxKeptUserName = 64
)

// session is one Redfish login session. Only the SHA-256 of its token is
// kept: a memory dump does not yield usable tokens, and the map lookup by
// hash leaks nothing about the token through timing.
type session struct {
	ID        string
	tokenHash [sha256.Size]byte
	AccountID int64
	// accountUID binds the session to the account's identity
	// (Account.UID), which no later account can have.
	accountUID string
	Created    time.Time
	LastUsed   time.Time
	Client     string
	Context    string
}

// lockKey is what failed sign-ins are counted against: one account from
// one source address. An attacker's failures lock the account from the
// attacker's address only; its owner still signs in from elsewhere.
type lockKey struct {
	source string
	user   string
}

type lockState struct {
	failures    int
	lastFailure time.Time
	lockedUntil time.Time
	// notBefore is when the next attempt from this address for this
	// account is looked at; earlier ones get 429 with Retry-After. The
	// wait doubles with each failure (1 s after the second, capped at
	// maxSignInDelay), so the handler never sleeps.
	notBefore time.Time
	delay     time.Duration
}

// throttledError: a sign-in came before the delay its source's failures
// earned had passed.
type throttledError struct{ retryAfter time.Duration }

func (e *throttledError) Error() string {
	return fmt.Sprintf("sign-in throttled for %s after failed attempts", e.retryAfter)
}

// lockedError: the right password for an account locked from this
// address. Only then does the answer say that the account is locked, so
// that guessers learn nothing from it.
type lockedError struct{ until time.Time }

func (e *lockedError) Error() string { return "account locked until " + e.until.Format(time.RFC3339) }

// Authenticator checks credentials (sessions and HTTP Basic), enforces the
// lockout policy and keeps the sessions.
type Authenticator struct {
	s         *Service
	dummyHash []byte // compared against for unknown users, so timing does not tell

	mu          sync.Mutex
	sessions    map[[sha256.Size]byte]*session
	byID        map[string]*session
	locks       map[lockKey]*lockState
	basicCache  map[[sha256.Size]byte]time.Time
	timeout     time.Duration
	threshold   int
	lockFor     time.Duration
	nextSession int
	perAccount  int // sessions one account may hold
	pw          PasswordPolicy
	// changed is closed (and replaced) whenever an account or a session
	// changes, so that streams re-check their principal (watch).
	changed chan struct{}
}

func newAuthenticator(s *Service) *Authenticator {
	a := &Authenticator{
		s:          s,
		sessions:   map[[sha256.Size]byte]*session{},
		byID:       map[string]*session{},
		locks:      map[lockKey]*lockState{},
		basicCache: map[[sha256.Size]byte]time.Time{},
		perAccount: s.cfg.MaxSessionsPerAccount,
		changed:    make(chan struct{}),
	}
	a.dummyHash = []byte(dummyHashDefaultCost)
	if s.cfg.BcryptCost != bcrypt.DefaultCost {
		a.dummyHash, _ = bcrypt.GenerateFromPassword([]byte(randomPassword(16)), s.cfg.BcryptCost)
	}
	ctx := context.Background()
	get := func(key string, def int) int {
		v, err := s.store.Setting(ctx, key, strconv.Itoa(def))
		if err != nil {
			s.log.Warn("reading setting, using default", "key", key, "err", err)
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return def
		}
		return n
	}
	a.timeout = time.Duration(get(SettingSessionTimeout, int(s.cfg.SessionTimeout/time.Second))) * time.Second
	a.threshold = get(SettingLockoutThreshold, s.cfg.Lockout.Threshold)
	a.lockFor = time.Duration(get(SettingLockoutDuration, int(s.cfg.Lockout.Duration/time.Second))) * time.Second
	a.pw = PasswordPolicy{Min: get(SettingMinPasswordLength, defaultMinPasswordLength),
		Max: get(SettingMaxPasswordLength, BcryptMaxPassword)}
	if err := a.pw.Valid(); err != nil {
		s.log.Warn("stored password length policy is invalid, using the defaults", "err", err)
		a.pw = defaultPasswordPolicy()
	}
	return a
}

var errBadCredentials = errors.New("bad credentials")

// dummyHashDefaultCost is the unknown users' hash at bcrypt.DefaultCost: of
// a random password nobody kept (and an unknown user fails even with it).
// It is fixed because hashing one costs a fifth of a second of a box's
// boot under emulation.
const dummyHashDefaultCost = "$2a$10$CaoQOS7gUEK1BjwpqaELlujJmpTTT8U7QT6cFsdF/yjNZT.qlD.s."

// authenticate returns the request's principal from X-Auth-Token or HTTP
// Basic, or 401 NoValidSession.
func (a *Authenticator) Authenticate(c echo.Context) (*Principal, error) {
	if p := PrincipalOf(c); p != nil {
		return p, nil
	}
	r := c.Request()
	if tok := r.Header.Get("X-Auth-Token"); tok != "" {
		p, ok := a.bySession(tok)
		if !ok {
			return nil, noValidSession(r)
		}
		return p, passwordGate(r.Method, r.URL.Path, p)
	}
	if user, pw, ok := r.BasicAuth(); ok {
		acct, err := a.login(user, pw, c.RealIP())
		if err != nil {
			return nil, signInError(r, err)
		}
		p := a.Principal(acct, "")
		return p, passwordGate(r.Method, r.URL.Path, p)
	}
	return nil, noValidSession(r)
}

// signInError is the answer to failed credentials. A wrong password, an
// unknown or disabled account and a wrong password for a locked account
// all read the same; the right password for an account locked from this
// address says until when; too early after failures is 429 with
// Retry-After.
func signInError(r *http.Request, err error) *Error {
	var thr *throttledError
	if errors.As(err, &thr) {
		secs := max(int((thr.retryAfter+time.Second-1)/time.Second), 1)
		return NewError(http.StatusTooManyRequests, Msg{Key: "Base.GeneralError", Resolution: fmt.Sprintf(
			"Too many failed sign-ins for this account from this address: wait %d s before the next attempt "+
				"(the wait doubles with each failure, up to %d s).", secs, int(maxSignInDelay/time.Second))}).
			WithHeader("Retry-After", strconv.Itoa(secs)).WithCause(err)
	}
	e := noValidSession(r).WithCause(err)
	var lk *lockedError
	if errors.As(err, &lk) {
		e.Messages[0].Resolution = fmt.Sprintf("The password is right, but the account is locked until %s "+
			"(%s) after repeated failed sign-ins from this address (AccountService AccountLockoutThreshold). "+
			"Sign in again after then, from another address, or have an administrator unlock the account "+
			"(PATCH its ManagerAccount with Locked false, or poolctl accounts unlock).",
			lk.until.UTC().Format("15:04 MST"), lk.until.UTC().Format(time.RFC3339))
		return e
	}
	if errors.Is(err, errBadCredentials) {
		e.Messages[0].Resolution = "The user name or password is not right, or the account is disabled. " +
			"Check them and sign in again."
	}
	return e
}

// noValidSession is 401 NoValidSession. A browser answers a Basic
// challenge to a script's request with its own login dialog (and a
// headless one waits for it forever), so requests that say they come from
// a script (X-Requested-With: XMLHttpRequest, as the console sends and
// OpenBMC's bmcweb also honours) get no WWW-Authenticate: the console
// shows its own login page instead.
func noValidSession(r *http.Request) *Error {
	e := ErrNoValidSession()
	if r.Header.Get("X-Requested-With") == "XMLHttpRequest" {
		e.Header.Del("WWW-Authenticate")
	}
	return e
}

// passwordGate enforces PasswordChangeRequired (DSP0266 "Password change
// required handling"): such an account may read its own ManagerAccount
// and session, PATCH its password and log out; every other request is
// 403 with the PasswordChangeRequired message naming the account, which
// tells a client where to PATCH.
func passwordGate(method, path string, p *Principal) error {
	if !p.PasswordChange {
		return nil
	}
	acct := AccountsURI + "/" + p.AccountID
	sess := ""
	if p.SessionID != "" {
		sess = SessionsURI + "/" + p.SessionID
	}
	switch method {
	case http.MethodGet, http.MethodHead:
		if path == acct || (sess != "" && path == sess) {
			return nil
		}
	case http.MethodPatch:
		if path == acct {
			return nil
		}
	case http.MethodDelete:
		if sess != "" && path == sess {
			return nil
		}
	}
	return ErrPasswordChangeRequired(acct)
}

// errPasswordChangeRequired is 403 PasswordChangeRequired for the account
// at acctURI.
func ErrPasswordChangeRequired(acctURI string) *Error {
	return NewError(http.StatusForbidden, M("Base.PasswordChangeRequired", acctURI))
}

func (a *Authenticator) Principal(acct Account, sessionID string) *Principal {
	role, _ := LookupRole(acct.Role)
	return &Principal{
		AccountID:  strconv.FormatInt(acct.ID, 10),
		AccountUID: acct.UID,
		User:       acct.UserName,
		Role:       acct.Role,
		Privileges: role.Privileges,
		HostID:     acct.HostID,
		SessionID:  sessionID,

		PasswordChange: acct.PasswordChangeRequired,
		PasswordHash:   acct.PasswordHash,
	}
}

func (a *Authenticator) bySession(tok string) (*Principal, bool) {
	h := sha256.Sum256([]byte(tok))
	now := a.s.now()
	a.mu.Lock()
	sess, ok := a.sessions[h]
	if ok && subtle.ConstantTimeCompare(sess.tokenHash[:], h[:]) != 1 {
		ok = false
	}
	if ok && now.Sub(sess.LastUsed) > a.timeout {
		a.dropLocked(sess)
		ok = false
	}
	if ok {
		sess.LastUsed = now
	}
	a.mu.Unlock()
	if !ok {
		return nil, false
	}
	acct, found := a.s.store.AccountByUID(sess.accountUID)
	if !found || !acct.Enabled {
		a.mu.Lock()
		a.dropLocked(sess)
		a.mu.Unlock()
		return nil, false
	}
	return a.Principal(acct, sess.ID), true
}

// login checks a user name and password from source (the client's
// address) under the lockout policy. Unknown users cost the same bcrypt
// comparison as known ones and fail the same way. Failures are counted
// per (source, user): each one makes the next attempt from there wait
// longer (throttledError, answered 429 without looking at the password),
// and AccountLockoutThreshold of them lock the account from that source
// for AccountLockoutDuration. While locked, a wrong password fails as
// usual and the right one is lockedError.
func (a *Authenticator) login(user, pw, source string) (Account, error) {
	now := a.s.now()
	if len(user) > maxKeptUserName {
		// No account has such a name (userNamePattern); keep the lock
		// table and the logs small whatever a client sends.
		user = user[:maxKeptUserName]
	}
	key := lockKey{source: source, user: user}
	a.mu.Lock()
	ls := a.locks[key]
	if ls != nil && now.Before(ls.notBefore) {
		a.mu.Unlock()
		return Account{}, &throttledError{retryAfter: ls.notBefore.Sub(now)}
	}
	var lockedUntil time.Time
	if ls != nil && now.Before(ls.lockedUntil) {
		lockedUntil = ls.lockedUntil
	}
	a.mu.Unlock()

	acct, found := a.s.store.AccountByName(user)
	hash := a.dummyHash
	if found {
		hash = []byte(acct.PasswordHash)
	}
	ok := a.checkHash(user, pw, hash) && found && acct.Enabled

	a.mu.Lock()
	if ok && lockedUntil.IsZero() {
		delete(a.locks, key)
		a.mu.Unlock()
		return acct, nil
	}
	if ok {
		// Every attempt while locked waits again, so the lock's end
		// is no oracle to guess against at full speed.
		if ls := a.locks[key]; ls != nil {
			ls.delay = min(max(2*ls.delay, time.Second), maxSignInDelay)
			ls.notBefore = now.Add(ls.delay)
		}
		a.mu.Unlock()
		return Account{}, fmt.Errorf("login %q from %s: %w", user, source, &lockedError{until: lockedUntil})
	}
	locked, until := a.recordFailureLocked(key, now)
	threshold := a.threshold
	ls = a.locks[key]
	failures, delay := ls.failures, ls.delay
	a.mu.Unlock()
	switch {
	case locked:
		a.recordLockout(user, source, until, threshold, found, acct)
	case delay > 0:
		a.recordThrottle(user, source, failures, delay, found, acct)
	}
	return Account{}, fmt.Errorf("login %q from %s: %w", user, source, errBadCredentials)
}

// auditSignIn writes a sign-in policy action to the audit log and returns
// the URI it is about (the account's, or the AccountService's for a user
// name that has none).
func (a *Authenticator) auditSignIn(user, source, action string, found bool, acct Account, msg string) string {
	s := a.s
	origin := AccountServiceURI
	if found {
		origin = AccountURI(acct.ID)
	}
	e := LogEntry{Log: LogAudit, Created: s.now(), Severity: "Warning", UserName: user, Client: source,
		Method: action, URI: origin, Message: msg}
	if _, err := s.store.AppendLog(context.WithoutCancel(s.ctx), e, s.cfg.LogLimit); err != nil {
		s.log.Error("writing audit log", "err", err)
	}
	return origin
}

// recordThrottle writes a growing delay to the audit log (every failure
// that earns one, which Basic requests would otherwise leave unrecorded)
// and, when the delays start for this account and address, to the event
// log: at most one event per (address, account) until its failures are
// forgotten, so an attacker cannot flood the events.
func (a *Authenticator) recordThrottle(user, source string, failures int, delay time.Duration, found bool, acct Account) {
	origin := a.auditSignIn(user, source, "THROTTLE", found, acct,
		fmt.Sprintf("%s: %d failed sign-ins from %s; the next attempt from there waits %s", user, failures, source, delay))
	if failures == 2 {
		a.s.Publish(Event{MessageKey: "ResourceEvent.ResourceErrorsDetected",
			Args: []string{"UserName", "failed sign-ins of " + user + " from " + source + " (now throttled)"}, Origin: origin})
	}
}

// recordLockout writes a new lockout to the audit and event logs.
func (a *Authenticator) recordLockout(user, source string, until time.Time, threshold int, found bool, acct Account) {
	s := a.s
	s.log.Warn("account locked out after failed logins", "user", user, "source", source, "until", until)
	origin := a.auditSignIn(user, source, "LOCKOUT", found, acct,
		fmt.Sprintf("%s locked out for sign-ins from %s until %s after %d failed attempts",
			user, source, until.UTC().Format(time.RFC3339), threshold))
	s.Publish(Event{MessageKey: "ResourceEvent.ResourceWarningThresholdExceeded",
		Args: []string{"AccountLockoutThreshold", strconv.Itoa(threshold)}, Origin: origin})
}

// checkHash compares pw with a bcrypt hash. HTTP Basic sends the password
// with every request, so a successful comparison is remembered for a
// minute under a digest of (user, password, hash): a password change
// changes the hash and so forgets it.
func (a *Authenticator) checkHash(user, pw string, hash []byte) bool {
	key := sha256.Sum256([]byte(user + "\x00" + pw + "\x00" + string(hash)))
	now := a.s.now()
	a.mu.Lock()
	exp, cached := a.basicCache[key]
	a.mu.Unlock()
	if cached && now.Before(exp) {
		return true
	}
	if bcrypt.CompareHashAndPassword(hash, []byte(pw)) != nil {
		return false
	}
	a.mu.Lock()
	if len(a.basicCache) >= 1024 {
		clear(a.basicCache)
	}
	a.basicCache[key] = now.Add(basicCacheTTL)
	a.mu.Unlock()
	return true
}

// recordFailureLocked counts a failed sign-in of key at now: the next
// attempt waits longer, and at the threshold the key is locked. It reports
// whether this failure started a lockout, and until when.
func (a *Authenticator) recordFailureLocked(key lockKey, now time.Time) (bool, time.Time) {
	ls := a.locks[key]
	if ls == nil {
		if len(a.locks) >= maxLockoutEntries {
			a.evictLocksLocked(now)
		}
		ls = &lockState{}
		a.locks[key] = ls
	}
	// AccountLockoutCounterResetAfter: old failures are forgotten.
	if now.Sub(ls.lastFailure) > a.lockFor && !now.Before(ls.lockedUntil) {
		ls.failures, ls.delay = 0, 0
	}
	ls.failures++
	ls.lastFailure = now
	if ls.failures >= 2 || now.Before(ls.lockedUntil) {
		ls.delay = min(max(2*ls.delay, time.Second), maxSignInDelay)
		ls.notBefore = now.Add(ls.delay)
	}
	if a.threshold > 0 && ls.failures >= a.threshold && !now.Before(ls.lockedUntil) {
		ls.lockedUntil = now.Add(a.lockFor)
		ls.failures = 0
		return true, ls.lockedUntil
	}
	return false, time.Time{}
}

// evictLocksLocked makes room in the lock table: first what has expired,
// then (a flood of sources) the entries idle longest. Memory stays bounded
// whatever the number of addresses.
func (a *Authenticator) evictLocksLocked(now time.Time) {
	for k, v := range a.locks {
		if !now.Before(v.lockedUntil) && !now.Before(v.notBefore) && now.Sub(v.lastFailure) > a.lockFor {
			delete(a.locks, k)
		}
	}
	for len(a.locks) >= maxLockoutEntries {
		var oldest lockKey
		var t time.Time
		first := true
		for k, v := range a.locks {
			if first || v.lastFailure.Before(t) {
				oldest, t, first = k, v.lastFailure, false
			}
		}
		delete(a.locks, oldest)
	}
}

// locked reports whether user is locked out now from some address.
func (a *Authenticator) Locked(user string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.s.now()
	for k, ls := range a.locks {
		if k.user == user && now.Before(ls.lockedUntil) {
			return true
		}
	}
	return false
}

// unlock forgets user's failures and lockouts from every address.
func (a *Authenticator) Unlock(user string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k := range a.locks {
		if k.user == user {
			delete(a.locks, k)
		}
	}
}

// createSession logs in and returns the new session and its token.
//
// Session limits: an account holds at most perAccount sessions; its next
// login ends its least recently used one (the account's own doing, so its
// own logins keep working, and one account cannot fill the table). The
// table holds maxSessions, of which the last adminSessionReserve only
// Administrators may take; when even that is full an Administrator's login
// ends the least recently used session of another account.
func (a *Authenticator) createSession(user, pw, client, sessCtx string) (*session, string, error) {
	acct, err := a.login(user, pw, client)
	if err != nil {
		return nil, "", err
	}
	var raw [32]byte
	_, _ = rand.Read(raw[:])
	tok := base64.RawURLEncoding.EncodeToString(raw[:])
	now := a.s.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pruneLocked(now)
	var own []*session
	for _, sess := range a.byID {
		if sess.accountUID == acct.UID {
			own = append(own, sess)
		}
	}
	if len(own) >= a.perAccount {
		a.dropLocked(leastRecentlyUsed(own))
	}
	admin := acct.Role == RoleAdministrator
	switch {
	case len(a.byID) >= maxSessions && admin:
		var others []*session
		for _, sess := range a.byID {
			if o, ok := a.s.store.AccountByUID(sess.accountUID); !ok || o.Role != RoleAdministrator {
				others = append(others, sess)
			}
		}
		if len(others) == 0 {
			return nil, "", errSessionLimit
		}
		a.dropLocked(leastRecentlyUsed(others))
	case len(a.byID) >= maxSessions-adminSessionReserve && !admin:
		return nil, "", errSessionLimit
	}
	a.nextSession++
	sess := &session{
		ID:        strconv.Itoa(a.nextSession) + "-" + randomString("abcdefghijkmnopqrstuvwxyz23456789", 8),
		tokenHash: sha256.Sum256([]byte(tok)),
		AccountID: acct.ID, accountUID: acct.UID, Created: now, LastUsed: now, Client: client, Context: sessCtx,
	}
	a.sessions[sess.tokenHash] = sess
	a.byID[sess.ID] = sess
	return sess, tok, nil
}

func leastRecentlyUsed(ss []*session) *session {
	return slices.MinFunc(ss, func(x, y *session) int {
		return cmp.Or(x.LastUsed.Compare(y.LastUsed), cmp.Compare(x.ID, y.ID))
	})
}

var errSessionLimit = errors.New("session limit reached")

func (a *Authenticator) pruneLocked(now time.Time) {
	for _, sess := range a.byID {
		if now.Sub(sess.LastUsed) > a.timeout {
			a.dropLocked(sess)
		}
	}
}

func (a *Authenticator) dropLocked(sess *session) {
	delete(a.sessions, sess.tokenHash)
	delete(a.byID, sess.ID)
	a.notifyLocked()
}

// notifyLocked wakes every watcher to re-check its principal.
func (a *Authenticator) notifyLocked() {
	close(a.changed)
	a.changed = make(chan struct{})
}

// accountsChanged tells streams that an account changed (or went).
func (a *Authenticator) AccountsChanged() {
	a.mu.Lock()
	a.notifyLocked()
	a.mu.Unlock()
}

// valid reports whether p still stands as it was authenticated: the same
// account (by identity), enabled, with the same name, role and host
// binding, and its session still live (for HTTP Basic: the same password).
// Streams check it on every change, so they end when their principal does.
func (a *Authenticator) Valid(p *Principal) bool {
	acct, ok := a.s.store.AccountByUID(p.AccountUID)
	if !ok || !acct.Enabled || acct.UserName != p.User || acct.Role != p.Role || !sameHost(acct.HostID, p.HostID) {
		return false
	}
	if p.SessionID == "" {
		return acct.PasswordHash == p.PasswordHash
	}
	now := a.s.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	sess, ok := a.byID[p.SessionID]
	return ok && sess.accountUID == p.AccountUID && now.Sub(sess.LastUsed) <= a.timeout
}

func sameHost(x, y *HostID) bool {
	return (x == nil) == (y == nil) && (x == nil || *x == *y)
}

// watchInterval is how often a stream re-checks its principal when
// nothing changed (a session can expire without a change).
const watchInterval = 5 * time.Second

// watch returns a context that ends with ctx or as soon as p is no longer
// valid: the account deleted, disabled, renamed, given another role or
// host, its password changed (Basic), or its session ended.
func (a *Authenticator) Watch(ctx context.Context, p *Principal) (context.Context, context.CancelFunc) {
	wctx, cancel := context.WithCancel(ctx)
	go func() {
		defer cancel()
		tick := time.NewTicker(watchInterval)
		defer tick.Stop()
		for {
			a.mu.Lock()
			ch := a.changed
			a.mu.Unlock()
			if !a.Valid(p) {
				return
			}
			select {
			case <-wctx.Done():
				return
			case <-ch:
			case <-tick.C:
			}
		}
	}()
	return wctx, cancel
}

// listSessions returns copies of the live sessions, ordered by creation.
func (a *Authenticator) listSessions() []session {
	now := a.s.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pruneLocked(now)
	out := make([]session, 0, len(a.byID))
	for _, sess := range a.byID {
		out = append(out, *sess)
	}
	slices.SortFunc(out, func(x, y session) int {
		return cmp.Or(x.Created.Compare(y.Created), cmp.Compare(x.ID, y.ID))
	})
	return out
}

func (a *Authenticator) session(id string) (session, bool) {
	now := a.s.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pruneLocked(now)
	sess, ok := a.byID[id]
	if !ok {
		return session{}, false
	}
	return *sess, true
}

func (a *Authenticator) deleteSession(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	sess, ok := a.byID[id]
	if ok {
		a.dropLocked(sess)
	}
	return ok
}

// dropAccountSessions ends an account's sessions except keep (the one
// changing its own password stays logged in).
func (a *Authenticator) DropAccountSessions(uid string, keep string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, sess := range a.byID {
		if sess.accountUID == uid && sess.ID != keep {
			a.dropLocked(sess)
		}
	}
	a.notifyLocked()
}

func (a *Authenticator) SessionCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.byID)
}

func (a *Authenticator) Policy() (timeout time.Duration, threshold int, lockFor time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.timeout, a.threshold, a.lockFor
}

func (a *Authenticator) SetPolicy(timeout *time.Duration, threshold *int, lockFor *time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if timeout != nil {
		a.timeout = *timeout
	}
	if threshold != nil {
		a.threshold = *threshold
	}
	if lockFor != nil {
		a.lockFor = *lockFor
	}
}
