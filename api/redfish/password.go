package redfish

import (
	_ "embed"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"unicode"
)

// Password policy: length within AccountService MinPasswordLength and
// MaxPasswordLength (administrators PATCH both; kept in accounts.db), not
// only white space, not the user name (in any case, or reversed), and not
// one of the most common passwords (passwords/common.txt).
const (
	defaultMinPasswordLength = 8
	// lowestMinPasswordLength is as low as an administrator may set the
	// minimum: below it no password resists guessing offline.
	LowestMinPasswordLength = 8
	// bcryptMaxPassword: bcrypt reads at most 72 bytes, so a longer
	// password would be cut without the user knowing.
	BcryptMaxPassword = 72
)

//go:embed passwords/common.txt
var commonPasswordsText string

// commonPasswords is the embedded list, lower case, sorted for search.
var commonPasswords = func() []string {
	var out []string
	for _, line := range strings.Split(commonPasswordsText, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, strings.ToLower(line))
	}
	slices.Sort(out)
	return slices.Compact(out)
}()

type PasswordPolicy struct{ Min, Max int }

func defaultPasswordPolicy() PasswordPolicy {
	return PasswordPolicy{Min: defaultMinPasswordLength, Max: BcryptMaxPassword}
}

func (p PasswordPolicy) Valid() error {
	if p.Min < LowestMinPasswordLength || p.Max > BcryptMaxPassword || p.Min > p.Max {
		return fmt.Errorf("password length %d to %d: want %d <= MinPasswordLength <= MaxPasswordLength <= %d",
			p.Min, p.Max, LowestMinPasswordLength, BcryptMaxPassword)
	}
	return nil
}

// passwordError is a refused password: the Base message and the rule it
// broke, in words, for the Resolution.
type passwordError struct {
	key  string // Base.PasswordIncorrectLength or Base.PasswordComplexityNotMet
	rule string
}

func (e *passwordError) Error() string { return "password refused: " + e.rule }

// check applies the policy to pw for the account user.
func (p PasswordPolicy) Check(user, pw string) error {
	if n := len(pw); n < p.Min || n > p.Max {
		return &passwordError{key: "Base.PasswordIncorrectLength", rule: fmt.Sprintf(
			"The password has %d bytes; it must have %d to %d (AccountService MinPasswordLength and MaxPasswordLength).",
			n, p.Min, p.Max)}
	}
	if strings.TrimFunc(pw, unicode.IsSpace) == "" {
		return &passwordError{key: "Base.PasswordComplexityNotMet",
			rule: "The password is only white space; choose one with other characters."}
	}
	lower := strings.ToLower(pw)
	if u := strings.ToLower(user); u != "" && (lower == u || lower == reverse(u)) {
		return &passwordError{key: "Base.PasswordComplexityNotMet",
			rule: "The password is the account's user name (or that name reversed); choose another."}
	}
	if _, found := slices.BinarySearch(commonPasswords, lower); found {
		return &passwordError{key: "Base.PasswordComplexityNotMet",
			rule: "The password is one of the most commonly used passwords, which are guessed first; choose another."}
	}
	return nil
}

func reverse(s string) string {
	r := []rune(s)
	slices.Reverse(r)
	return string(r)
}

// passwordGuidance is AccountService.PasswordGuidanceMessage.
func (p PasswordPolicy) Guidance() string {
	return fmt.Sprintf("%d to %d bytes; not only white space, not the user name (or it reversed), "+
		"and not one of the most common passwords.", p.Min, p.Max)
}

// errPassword turns a policy refusal into its 400 answer, naming the rule.
func ErrPassword(err error) *Error {
	var pe *passwordError
	if !errors.As(err, &pe) {
		return ErrInternal(err)
	}
	return NewError(http.StatusBadRequest, Msg{Key: pe.key, Resolution: pe.rule}.WithRelated("Password"))
}

func (a *Authenticator) PasswordPolicy() PasswordPolicy {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pw
}

func (a *Authenticator) SetPasswordPolicy(p PasswordPolicy) {
	a.mu.Lock()
	a.pw = p
	a.mu.Unlock()
}
