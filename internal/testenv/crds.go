package testenv

import (
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	mcscrd "sigs.k8s.io/mcs-api/config/crd"
	"sigs.k8s.io/yaml"
)

// mcsCRDs parses the ServiceExport and ServiceImport CRDs embedded in the
// mcs-api module (the same bytes as config/crd).
func mcsCRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, raw := range [][]byte{mcscrd.ServiceExportCRD, mcscrd.ServiceImportCRD} {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(raw, crd); err != nil {
			return nil, fmt.Errorf("parse embedded mcs-api CRD: %w", err)
		}
		if crd.Name == "" {
			return nil, fmt.Errorf("parse embedded mcs-api CRD: no metadata.name")
		}
		out = append(out, crd)
	}
	return out, nil
}
