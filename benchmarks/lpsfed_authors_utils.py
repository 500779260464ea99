# runs one of the authors' src/utils scripts from src/utils, as their README says, with
# utils/read_data.py importable both as a package module and as a top-level one (its relative
# import fails when the script is run directly)
import runpy, sys
sys.path[:0] = ['..', '.']
import utils.read_data as rd
sys.modules['read_data'] = rd
runpy.run_path(sys.argv[1], run_name='__main__')
