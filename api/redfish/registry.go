package redfish

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
)

// The DMTF message registries the service speaks, copied from the schema
// bundle: the daemon runs on the box without the bundle beside it.
//
//go:embed registries/*.json
var registryFiles embed.FS

// messageODataType is the Message schema version the service emits.
const messageODataType = "#Message.v1_3_0.Message"

// Message is a Redfish Message object, as used in error responses, task
// messages and log entries.
type Message struct {
	ODataType         string   `json:"@odata.type,omitempty"`
	MessageID         string   `json:"MessageId"`
	Message           string   `json:"Message"`
	MessageArgs       []string `json:"MessageArgs"`
	Severity          string   `json:"Severity,omitempty"` // deprecated, kept for older clients
	MessageSeverity   string   `json:"MessageSeverity"`
	Resolution        string   `json:"Resolution,omitempty"`
	RelatedProperties []string `json:"RelatedProperties,omitempty"`
}

// Msg names one registry message and carries its arguments, unresolved:
// handlers build Msgs without the registry, the writer resolves them.
// Key is "Prefix.MessageKey", e.g. "Base.ResourceNotFound".
type Msg struct {
	Key  string
	Args []string
	// Related are JSON pointers ("#/Password") to the request properties
	// the message is about.
	Related []string
	// Resolution overrides the registry's resolution text, for messages
	// such as GeneralError whose registry text says "see Resolution".
	Resolution string
}

// M is a shorthand for building a Msg; numbers and other values are
// formatted as MessageArgs strings.
func M(key string, args ...any) Msg {
	m := Msg{Key: key}
	for _, a := range args {
		m.Args = append(m.Args, argString(a))
	}
	return m
}

func argString(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case int:
		return strconv.Itoa(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case uint64:
		return strconv.FormatUint(v, 10)
	case fmt.Stringer:
		return v.String()
	}
	return fmt.Sprint(a)
}

// WithRelated returns m with the JSON pointers of the properties it is about.
func (m Msg) WithRelated(props ...string) Msg {
	for _, p := range props {
		m.Related = append(m.Related, "#/"+strings.TrimPrefix(p, "/"))
	}
	return m
}

type registryMessage struct {
	Message         string
	MessageSeverity string
	NumberOfArgs    int
	Resolution      string
}

type registry struct {
	prefix   string
	idPrefix string // "Base.1.22." — MessageIds carry major.minor only
	messages map[string]registryMessage
}

// Registries holds the parsed message registries, keyed by prefix.
type Registries struct {
	byPrefix map[string]*registry
	files    map[string][]byte // Id ("Base.1.22.1") → the registry file
}

// LoadRegistries parses the embedded registries.
func LoadRegistries() (*Registries, error) {
	rs := &Registries{byPrefix: map[string]*registry{}, files: map[string][]byte{}}
	ents, err := fs.ReadDir(registryFiles, "registries")
	if err != nil {
		return nil, fmt.Errorf("api: registries: %w", err)
	}
	for _, e := range ents {
		raw, err := registryFiles.ReadFile("registries/" + e.Name())
		if err != nil {
			return nil, fmt.Errorf("api: registries: %w", err)
		}
		var doc struct {
			ID              string `json:"Id"`
			RegistryPrefix  string
			RegistryVersion string
			Messages        map[string]registryMessage
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			return nil, fmt.Errorf("api: registry %s: %w", e.Name(), err)
		}
		v := strings.Split(doc.RegistryVersion, ".")
		if len(v) < 2 || doc.RegistryPrefix == "" {
			return nil, fmt.Errorf("api: registry %s: bad prefix or version %q", e.Name(), doc.RegistryVersion)
		}
		rs.byPrefix[doc.RegistryPrefix] = &registry{
			prefix:   doc.RegistryPrefix,
			idPrefix: doc.RegistryPrefix + "." + v[0] + "." + v[1] + ".",
			messages: doc.Messages,
		}
		rs.files[doc.ID] = raw
	}
	return rs, nil
}

// Has reports whether key ("Base.ResourceNotFound") names a message.
func (rs *Registries) Has(key string) bool {
	_, _, ok := rs.lookup(key)
	return ok
}

// NumberOfArgs is how many arguments the message takes (-1 if unknown).
func (rs *Registries) NumberOfArgs(key string) int {
	_, m, ok := rs.lookup(key)
	if !ok {
		return -1
	}
	return m.NumberOfArgs
}

func (rs *Registries) lookup(key string) (*registry, registryMessage, bool) {
	prefix, name, ok := strings.Cut(key, ".")
	if !ok {
		return nil, registryMessage{}, false
	}
	r := rs.byPrefix[prefix]
	if r == nil {
		return nil, registryMessage{}, false
	}
	m, ok := r.messages[name]
	return r, m, ok
}

// Resolve turns a Msg into the Message a client sees: the versioned
// MessageId, the text with %n replaced by the arguments, the severity and
// resolution from the registry. An unknown key resolves to GeneralError
// with the key in Resolution so that a bug still yields a valid message.
func (rs *Registries) Resolve(m Msg) Message {
	r, rm, ok := rs.lookup(m.Key)
	if !ok {
		return rs.Resolve(Msg{Key: "Base.GeneralError", Resolution: "unknown message " + m.Key})
	}
	_, name, _ := strings.Cut(m.Key, ".")
	args := make([]string, rm.NumberOfArgs)
	copy(args, m.Args)
	text := rm.Message
	// Replace from the highest index down so %1 does not eat %10.
	for i := len(args); i >= 1; i-- {
		text = strings.ReplaceAll(text, "%"+strconv.Itoa(i), args[i-1])
	}
	res := rm.Resolution
	if m.Resolution != "" {
		res = m.Resolution
	}
	return Message{
		ODataType:         messageODataType,
		MessageID:         r.idPrefix + name,
		Message:           text,
		MessageArgs:       args,
		Severity:          rm.MessageSeverity,
		MessageSeverity:   rm.MessageSeverity,
		Resolution:        res,
		RelatedProperties: m.Related,
	}
}

// File returns the registry document with the given Id, for clients that
// look messages up (/redfish/v1/Registries).
func (rs *Registries) File(id string) ([]byte, bool) {
	b, ok := rs.files[id]
	return b, ok
}

// IDs lists the registries' Ids.
func (rs *Registries) IDs() []string {
	ids := make([]string, 0, len(rs.files))
	for id := range rs.files {
		ids = append(ids, id)
	}
	return ids
}
