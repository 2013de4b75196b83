typedef int ember_tp_empty_unit_t;
