/* common/regex_cost.h — how large a POSIX extended regular expression
 * grows once compiled, estimated before regcomp sees it. glibc spells a
 * repetition out: "x+" becomes "xx*" and "x{2,5}" five copies of x, so a
 * repetition of a repetition multiplies, and a pattern of forty bytes
 * ("a" and twenty-eight '+', or groups nested twenty deep, each repeated)
 * can take gigabytes and minutes to compile. Pure and reentrant. */
#ifndef OPSRUN_REGEX_COST_H
#define OPSRUN_REGEX_COST_H

#include "common/common.h"

/* An upper bound on the parts (characters, bracket expressions, groups)
 * regcomp would make of src, counting each copy a repetition spells out;
 * saturates at SIZE_MAX. Nothing is checked: a malformed pattern is left
 * to regcomp to refuse. */
size_t regex_cost(const char *src);

#endif
