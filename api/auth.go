package api

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

// Password policy (bcrypt reads at most 72 bytes).
const (
	minPasswordLength = 8
	maxPasswordLength = 72
	maxSessions       = 256
	maxLockoutEntries = 4096
	basicCacheTTL     = time.Minute
)

func checkPassword(pw string) error {
	if len(pw) < minPasswordLength || len(pw) > maxPasswordLength {
		return fmt.Errorf("password must be %d to %d bytes", minPasswordLength, maxPasswordLength)
	}
	return nil
}

// session is one Redfish login session. Only the SHA-256 of its token is
// kept: a memory dump does not yield usable tokens, and the map lookup by
// hash leaks nothing about the token through timing.
type session struct {
	ID        string
	tokenHash [sha256.Size]byte
	AccountID int64
	Created   time.Time
	LastUsed  time.Time
	Client    string
	Context   string
}

type lockState struct {
	failures    int
	lastFailure time.Time
	lockedUntil time.Time
}

// authenticator checks credentials (sessions and HTTP Basic), enforces the
// lockout policy and keeps the sessions.
type authenticator struct {
	s         *Server
	dummyHash []byte // compared against for unknown users, so timing does not tell

	mu          sync.Mutex
	sessions    map[[sha256.Size]byte]*session
	byID        map[string]*session
	locks       map[string]*lockState
	basicCache  map[[sha256.Size]byte]time.Time
	timeout     time.Duration
	threshold   int
	lockFor     time.Duration
	nextSession int
}

func newAuthenticator(s *Server) *authenticator {
	a := &authenticator{
		s:          s,
		sessions:   map[[sha256.Size]byte]*session{},
		byID:       map[string]*session{},
		locks:      map[string]*lockState{},
		basicCache: map[[sha256.Size]byte]time.Time{},
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
	a.timeout = time.Duration(get(settingSessionTimeout, int(s.cfg.SessionTimeout/time.Second))) * time.Second
	a.threshold = get(settingLockoutThreshold, s.cfg.Lockout.Threshold)
	a.lockFor = time.Duration(get(settingLockoutDuration, int(s.cfg.Lockout.Duration/time.Second))) * time.Second
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
func (a *authenticator) authenticate(c echo.Context) (*Principal, error) {
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
		acct, err := a.login(user, pw)
		if err != nil {
			return nil, noValidSession(r).WithCause(err)
		}
		p := a.principal(acct, "")
		return p, passwordGate(r.Method, r.URL.Path, p)
	}
	return nil, noValidSession(r)
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
	if !p.passwordChange {
		return nil
	}
	acct := accountsURI + "/" + p.AccountID
	sess := ""
	if p.SessionID != "" {
		sess = sessionsURI + "/" + p.SessionID
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
	return errPasswordChangeRequired(acct)
}

// errPasswordChangeRequired is 403 PasswordChangeRequired for the account
// at acctURI.
func errPasswordChangeRequired(acctURI string) *Error {
	return NewError(http.StatusForbidden, M("Base.PasswordChangeRequired", acctURI))
}

func (a *authenticator) principal(acct Account, sessionID string) *Principal {
	role, _ := LookupRole(acct.Role)
	return &Principal{
		AccountID:  strconv.FormatInt(acct.ID, 10),
		User:       acct.UserName,
		Role:       acct.Role,
		Privileges: role.Privileges,
		HostID:     acct.HostID,
		SessionID:  sessionID,

		passwordChange: acct.PasswordChangeRequired,
	}
}

func (a *authenticator) bySession(tok string) (*Principal, bool) {
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
	acct, found := a.s.store.Account(sess.AccountID)
	if !found || !acct.Enabled {
		a.mu.Lock()
		a.dropLocked(sess)
		a.mu.Unlock()
		return nil, false
	}
	return a.principal(acct, sess.ID), true
}

// login checks a user name and password under the lockout policy. Unknown
// users cost the same bcrypt comparison as known ones, and a locked
// account fails even with the right password.
func (a *authenticator) login(user, pw string) (Account, error) {
	now := a.s.now()
	a.mu.Lock()
	ls := a.locks[user]
	if ls != nil && now.Before(ls.lockedUntil) {
		a.mu.Unlock()
		return Account{}, fmt.Errorf("account %q locked out: %w", user, errBadCredentials)
	}
	a.mu.Unlock()

	acct, found := a.s.store.AccountByName(user)
	hash := a.dummyHash
	if found {
		hash = []byte(acct.PasswordHash)
	}
	ok := a.checkHash(user, pw, hash) && found && acct.Enabled

	a.mu.Lock()
	defer a.mu.Unlock()
	if ok {
		delete(a.locks, user)
		return acct, nil
	}
	a.recordFailureLocked(user, now)
	return Account{}, fmt.Errorf("login %q: %w", user, errBadCredentials)
}

// checkHash compares pw with a bcrypt hash. HTTP Basic sends the password
// with every request, so a successful comparison is remembered for a
// minute under a digest of (user, password, hash): a password change
// changes the hash and so forgets it.
func (a *authenticator) checkHash(user, pw string, hash []byte) bool {
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

func (a *authenticator) recordFailureLocked(user string, now time.Time) {
	if a.threshold <= 0 {
		return
	}
	ls := a.locks[user]
	if ls == nil {
		if len(a.locks) >= maxLockoutEntries {
			for k, v := range a.locks {
				if now.After(v.lockedUntil) {
					delete(a.locks, k)
				}
			}
		}
		ls = &lockState{}
		a.locks[user] = ls
	}
	// AccountLockoutCounterResetAfter: old failures are forgotten.
	if now.Sub(ls.lastFailure) > a.lockFor {
		ls.failures = 0
	}
	ls.failures++
	ls.lastFailure = now
	if ls.failures >= a.threshold {
		ls.lockedUntil = now.Add(a.lockFor)
		ls.failures = 0
		a.s.log.Warn("account locked out after failed logins", "user", user, "until", ls.lockedUntil)
	}
}

// locked reports whether user is locked out now.
func (a *authenticator) locked(user string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	ls := a.locks[user]
	return ls != nil && a.s.now().Before(ls.lockedUntil)
}

func (a *authenticator) unlock(user string) {
	a.mu.Lock()
	delete(a.locks, user)
	a.mu.Unlock()
}

// createSession logs in and returns the new session and its token.
func (a *authenticator) createSession(user, pw, client, sessCtx string) (*session, string, error) {
	acct, err := a.login(user, pw)
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
	if len(a.sessions) >= maxSessions {
		return nil, "", errSessionLimit
	}
	a.nextSession++
	sess := &session{
		ID:        strconv.Itoa(a.nextSession) + "-" + randomString("abcdefghijkmnopqrstuvwxyz23456789", 8),
		tokenHash: sha256.Sum256([]byte(tok)),
		AccountID: acct.ID, Created: now, LastUsed: now, Client: client, Context: sessCtx,
	}
	a.sessions[sess.tokenHash] = sess
	a.byID[sess.ID] = sess
	return sess, tok, nil
}

var errSessionLimit = errors.New("session limit reached")

func (a *authenticator) pruneLocked(now time.Time) {
	for _, sess := range a.byID {
		if now.Sub(sess.LastUsed) > a.timeout {
			a.dropLocked(sess)
		}
	}
}

func (a *authenticator) dropLocked(sess *session) {
	delete(a.sessions, sess.tokenHash)
	delete(a.byID, sess.ID)
}

// listSessions returns copies of the live sessions, ordered by creation.
func (a *authenticator) listSessions() []session {
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

func (a *authenticator) session(id string) (session, bool) {
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

func (a *authenticator) deleteSession(id string) bool {
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
func (a *authenticator) dropAccountSessions(accountID int64, keep string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, sess := range a.byID {
		if sess.AccountID == accountID && sess.ID != keep {
			a.dropLocked(sess)
		}
	}
}

func (a *authenticator) sessionCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.byID)
}

func (a *authenticator) policy() (timeout time.Duration, threshold int, lockFor time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.timeout, a.threshold, a.lockFor
}

func (a *authenticator) setPolicy(timeout *time.Duration, threshold *int, lockFor *time.Duration) {
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
