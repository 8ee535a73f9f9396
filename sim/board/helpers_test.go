package board

import (
	"errors"

	"cxlpool/bmc/pldm"
)

func asCC(err error, cc *pldm.CompletionCode) bool { return errors.As(err, cc) }
