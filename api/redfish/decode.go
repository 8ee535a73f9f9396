package redfish

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
)

// Decode reads the request body strictly into dst, a pointer to a struct
// that lists the properties a client may send:
//
//	type accountPatch struct {
//		UserName *string `json:"UserName"`
//		RoleId   *string `json:"RoleId" enum:"Administrator|Operator"`
//		Id       string  `json:"Id" rf:"readonly"`
//		Password string  `json:"Password" rf:"required"`
//	}
//
// A property the struct lacks is 400 PropertyUnknown, one tagged
// rf:"readonly" is 400 PropertyNotWritable, a value of the wrong JSON type
// is 400 PropertyValueTypeError, a value outside an enum tag is 400
// PropertyValueNotInList and a missing rf:"required" one is 400
// PropertyMissing. OData annotations ("@odata.type", "X@Redfish...") are
// ignored unless the struct names them. Pointer fields tell "absent" (nil)
// from "present"; JSON null is accepted only for rf:"nullable" fields.
// The body must be application/json (415) and at most MaxBodyBytes (413).
func (s *Service) Decode(c echo.Context, dst any) error {
	r := c.Request()
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return ErrUnsupportedMediaType()
		}
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return ErrPayloadTooLarge()
		}
		if errors.Is(err, errBodyTimeout) {
			return s.errRequestTimeout().WithCause(err)
		}
		return ErrMalformedJSON().WithCause(err)
	}
	return DecodeJSON(raw, dst)
}

// decodeJSON is Decode without the HTTP parts, for tests and fuzzing.
func DecodeJSON(raw []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return ErrMalformedJSON().WithCause(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return ErrMalformedJSON()
	}
	if _, ok := v.(map[string]any); !ok {
		return NewError(http.StatusBadRequest, M("Base.UnrecognizedRequestBody"))
	}
	rv := reflect.ValueOf(dst)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		return ErrInternal(fmt.Errorf("decode: destination %T is not a pointer to a struct", dst))
	}
	if err := decodeValue("", v, rv.Elem(), ""); err != nil {
		return err
	}
	return nil
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "/" + name
}

// valueText is a value as the messages quote it.
func ValueText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

type fieldInfo struct {
	index    int
	readonly bool
	required bool
	nullable bool
	enum     []string
}

func structFields(t reflect.Type) map[string]fieldInfo {
	out := map[string]fieldInfo{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fi := fieldInfo{index: i}
		for _, o := range strings.Split(f.Tag.Get("rf"), ",") {
			switch o {
			case "readonly":
				fi.readonly = true
			case "required":
				fi.required = true
			case "nullable":
				fi.nullable = true
			}
		}
		if e := f.Tag.Get("enum"); e != "" {
			fi.enum = strings.Split(e, "|")
		}
		out[name] = fi
	}
	return out
}

// decodeValue stores the JSON value v (from a UseNumber decoder) into rv,
// reporting problems against the property path.
func decodeValue(path string, v any, rv reflect.Value, enumTag string) error {
	typeErr := func() error { return ErrPropertyValueType(ValueText(v), path) }
	if rv.Kind() == reflect.Pointer {
		if v == nil {
			rv.SetZero()
			return nil
		}
		if rv.IsNil() {
			rv.Set(reflect.New(rv.Type().Elem()))
		}
		return decodeValue(path, v, rv.Elem(), enumTag)
	}
	if rv.Type() == reflect.TypeFor[json.RawMessage]() {
		b, err := json.Marshal(v)
		if err != nil {
			return typeErr()
		}
		rv.SetBytes(b)
		return nil
	}
	if v == nil {
		return typeErr()
	}
	switch rv.Kind() {
	case reflect.Interface:
		rv.Set(reflect.ValueOf(v))
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return typeErr()
		}
		fields := structFields(rv.Type())
		for _, k := range sortedKeys(obj) {
			fi, ok := fields[k]
			if !ok {
				if strings.Contains(k, "@") {
					continue // an annotation the resource does not take
				}
				return ErrPropertyUnknown(join(path, k))
			}
			if fi.readonly {
				return ErrPropertyNotWritable(join(path, k))
			}
			if obj[k] == nil && !fi.nullable {
				return ErrPropertyValueType("null", join(path, k))
			}
			if err := decodeValue(join(path, k), obj[k], rv.Field(fi.index), strings.Join(fi.enum, "|")); err != nil {
				return err
			}
		}
		for _, name := range sortedKeys(fields) {
			if fields[name].required {
				if _, ok := obj[name]; !ok {
					return ErrPropertyMissing(join(path, name))
				}
			}
		}
	case reflect.String:
		str, ok := v.(string)
		if !ok {
			return typeErr()
		}
		if enumTag != "" && !slices.Contains(strings.Split(enumTag, "|"), str) {
			return ErrPropertyValueNotInList(str, path)
		}
		rv.SetString(str)
	case reflect.Bool:
		b, ok := v.(bool)
		if !ok {
			return typeErr()
		}
		rv.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := v.(json.Number)
		if !ok {
			return typeErr()
		}
		i, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil {
			if isIntegral(n) {
				return ErrPropertyValueOutOfRange(string(n), path)
			}
			return typeErr()
		}
		if rv.OverflowInt(i) {
			return ErrPropertyValueOutOfRange(string(n), path)
		}
		rv.SetInt(i)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := v.(json.Number)
		if !ok {
			return typeErr()
		}
		u, err := strconv.ParseUint(string(n), 10, 64)
		if err != nil {
			if isIntegral(n) {
				return ErrPropertyValueOutOfRange(string(n), path)
			}
			return typeErr()
		}
		if rv.OverflowUint(u) {
			return ErrPropertyValueOutOfRange(string(n), path)
		}
		rv.SetUint(u)
	case reflect.Float32, reflect.Float64:
		n, ok := v.(json.Number)
		if !ok {
			return typeErr()
		}
		f, err := n.Float64()
		if err != nil || math.IsInf(f, 0) {
			return ErrPropertyValueOutOfRange(string(n), path)
		}
		rv.SetFloat(f)
	case reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			return typeErr()
		}
		out := reflect.MakeSlice(rv.Type(), len(arr), len(arr))
		for i, x := range arr {
			if err := decodeValue(join(path, strconv.Itoa(i)), x, out.Index(i), enumTag); err != nil {
				return err
			}
		}
		rv.Set(out)
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok || rv.Type().Key().Kind() != reflect.String {
			return typeErr()
		}
		out := reflect.MakeMapWithSize(rv.Type(), len(obj))
		for _, k := range sortedKeys(obj) {
			ev := reflect.New(rv.Type().Elem()).Elem()
			if err := decodeValue(join(path, k), obj[k], ev, ""); err != nil {
				return err
			}
			out.SetMapIndex(reflect.ValueOf(k).Convert(rv.Type().Key()), ev)
		}
		rv.Set(out)
	default:
		return ErrInternal(fmt.Errorf("decode: %s: unsupported field type %s", path, rv.Type()))
	}
	return nil
}

// isIntegral reports whether a JSON number has no fraction or exponent.
func isIntegral(n json.Number) bool { return !strings.ContainsAny(string(n), ".eE") }

// sortedKeys makes decoding deterministic: with several problems, the
// same one is reported every time.
func sortedKeys[V any](m map[string]V) []string {
	keys := slices.Collect(maps.Keys(m))
	slices.Sort(keys)
	return keys
}
