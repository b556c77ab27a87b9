package app

import (
	"encoding/json"
	"io"

	"sigs.k8s.io/yaml"
)

// printStructured writes v as JSON or YAML when format asks for one, and
// reports whether it did; the caller prints its table otherwise.
func printStructured(w io.Writer, format string, v any) (bool, error) {
	var data []byte
	var err error
	switch format {
	case "json":
		if data, err = json.MarshalIndent(v, "", "  "); err == nil {
			data = append(data, '\n')
		}
	case "yaml":
		data, err = yaml.Marshal(v)
	default:
		return false, nil
	}
	if err != nil {
		return true, err
	}
	_, err = w.Write(data)
	return true, err
}
